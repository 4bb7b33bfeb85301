"""Online packing: every token of the stream once (or reported), bounded buffer, utilization."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.errors import InputError
from ctxkit.packing.online import OnlinePacker, pack_stream
from ctxkit.packing.plan import pack_lengths


@st.composite
def streams(draw):
    cap = draw(st.integers(1, 30))
    item = st.one_of(st.integers(0, cap), st.just(cap), st.integers(cap + 1, 3 * cap + 2))
    return draw(st.lists(item, max_size=60)), cap


@settings(max_examples=80, deadline=None)
@given(case=streams(), buffer_size=st.integers(1, 20),
       overflow=st.sampled_from(["split", "truncate", "drop"]),
       carry=st.sampled_from([0.0, 0.25, 0.9]))
def test_stream_places_every_token_once_or_reports_it(case, buffer_size, overflow, carry):
    lengths, cap = case
    packer = OnlinePacker(capacity=cap, buffer_size=buffer_size, overflow=overflow,
                          carry_fraction=carry)
    windows = list(pack_stream(lengths, capacity=cap, packer=packer))
    covered: dict[int, list[tuple[int, int]]] = {}
    for w in windows:
        assert 0 < w.tokens <= cap
        assert w.items == [lengths[i] for i, _, _ in w.segments]
        for i, start, stop in w.segments:
            covered.setdefault(i, []).append((start, stop))
    for i, n in enumerate(lengths):
        ranges = sorted(covered.get(i, []))
        if n == 0:
            assert i in packer.empty and not ranges
        elif n > cap and overflow == "drop":
            assert i in packer.dropped and not ranges
        else:
            want = cap if (n > cap and overflow == "truncate") else n
            pos = 0
            for start, stop in ranges:
                assert start == pos
                pos = stop
            assert pos == want
    assert packer.pending == 0
    assert packer.n_windows == len(windows)
    assert packer.total_tokens == sum(w.tokens for w in windows)
    # memory stays bounded: the buffer never holds much more than buffer_size pieces
    assert packer.peak_buffer <= buffer_size + 3 + int(carry * buffer_size) + 3


def test_error_names_the_stream_item():
    packer = OnlinePacker(capacity=8)
    packer.add(3)
    with pytest.raises(ValueError, match="stream item 1 has 9 tokens"):
        packer.add(9)


def test_sequences_are_measured_with_len_and_returned():
    seqs = [[1] * 5, [2] * 3, [3] * 8]
    windows = list(pack_stream(seqs, capacity=8, buffer_size=10))
    got = sorted(tuple(tuple(x) for x in w.items) for w in windows)
    assert got == sorted([((3,) * 8,), ((1,) * 5, (2,) * 3)])


def test_utilization_approaches_global_bfd_as_buffer_grows():
    rng = np.random.default_rng(0)
    lengths = rng.integers(30, 480, 4000)
    best = pack_lengths(lengths, capacity=2048).utilization
    utils = []
    for size in (10, 100, 4000):
        packer = OnlinePacker(capacity=2048, buffer_size=size)
        for _ in pack_stream(lengths, capacity=2048, packer=packer):
            pass
        utils.append(packer.utilization)
    assert utils[0] <= utils[1] + 1e-9 and utils[1] <= utils[2] + 1e-9
    assert utils[2] == pytest.approx(best, abs=1e-9)  # one buffer for everything: the global plan
    assert utils[1] > 0.97


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 8, "buffer_size": 0}, "buffer_size"),
        ({"capacity": 8, "strategy": "wrapped"}, "strategy .wrapped. is unknown"),
        ({"capacity": 8, "overflow": "x"}, "overflow"),
        ({"capacity": 8, "carry_fraction": 1.0}, "carry_fraction"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OnlinePacker(**kwargs)


def test_online_packer_takes_pack_options():
    """One option set for every packing entry point: PackOptions drives the stream packer
    too, keywords override it, and collating fields are refused, not ignored."""
    from ctxkit.errors import OptionError
    from ctxkit.packing.options import PackOptions

    lengths = [5, 3, 6, 2, 7, 1, 9]
    opts = PackOptions(capacity=8, strategy="ffd", overflow="split")
    by_opts = [w.segments for w in pack_stream(lengths, buffer_size=4, options=opts)]
    by_kw = [w.segments for w in pack_stream(lengths, capacity=8, buffer_size=4, strategy="ffd",
                                             overflow="split")]
    assert by_opts == by_kw
    assert OnlinePacker(options=opts, capacity=16).capacity == 16
    with pytest.raises(OptionError, match="separator_id apply when collating"):
        OnlinePacker(options=PackOptions(capacity=8, separator_id=0))
    with pytest.raises(InputError, match="needs capacity"):
        OnlinePacker()
