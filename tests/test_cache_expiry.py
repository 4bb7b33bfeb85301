"""A provider's prompt cache expires after an idle gap: the accounting counts it, and the
prefix-cache window compacts then, when a compaction costs no cache."""

import math

import pytest

from ctxkit import ChatMemory
from ctxkit.chat.billing import CacheMeter, cache_accounting
from ctxkit.chat.prefix_window import PrefixCacheOptions
from ctxkit.errors import InputError, OptionError


def _sessions(n_sessions=6, turns=14):
    """(message, time) pairs: sessions of turns a minute apart, sessions a day apart."""
    out = []
    for s in range(n_sessions):
        for t in range(turns):
            role = "user" if t % 2 == 0 else "assistant"
            out.append(({"role": role, "content": f"Session {s} turn {t}: shelf {s}-{t} holds "
                                                   f"{(s * 31 + t * 7) % 97} jars of jam."},
                        s * 86_400 + t * 60))
    return out


def test_the_meter_counts_nothing_cached_after_the_lifetime():
    w = [{"role": "user", "content": "Plan a trip to Lisbon."}]
    acc = cache_accounting([w, w, w, w], ttl=300, times=[0, 100, 450, 2000])
    assert [t.expired for t in acc.turns] == [False, False, True, True]
    assert [t.cached_tokens > 0 for t in acc.turns] == [False, True, False, False]
    assert acc.expired == 2 and acc.to_dict()["expired"] == 2
    forever = cache_accounting([w, w, w, w], times=[0, 100, 450, 2000])
    assert forever.expired == 0 and forever.cached_tokens == 3 * acc.turns[1].cached_tokens


def test_bad_lifetimes_and_times():
    w = [{"role": "user", "content": "hi"}]
    for ttl in (0, -5, True, "300", math.inf * 0):
        with pytest.raises(OptionError, match="ttl"):
            CacheMeter(ttl=ttl)
    with pytest.raises(OptionError, match="ttl"):
        PrefixCacheOptions(ttl=-1)
    with pytest.raises(OptionError, match="at"):
        CacheMeter(ttl=300).record(w, at=math.nan)
    with pytest.raises(InputError, match="one time per window"):
        cache_accounting([w, w], ttl=300, times=[0])
    with pytest.raises(OptionError, match="at"):
        ChatMemory(64, scorer="idf").add({"role": "user", "content": "x"}, at="noon")


def _replay(ttl):
    mem = ChatMemory(300, scorer="idf", keep_last=2,
                     prefix_cache=PrefixCacheOptions(ttl=ttl))
    windows, times = [], []
    for message, at in _sessions():
        mem.add(message, at=at)
        windows.append(mem.compress().messages)
        times.append(at)
    return mem, cache_accounting(windows, ttl=300, times=times)


def test_compactions_wait_for_an_expired_cache():
    aware_mem, aware = _replay(300)
    blind_mem, blind = _replay(None)
    assert aware.expired == blind.expired == 5  # one per new session
    assert aware_mem._window.idle_compactions >= 4
    assert blind_mem._window.idle_compactions == 0

    def warm_breaks(acc):  # a warm window whose prefix changed: a compaction paid for
        return sum(1 for a, b in zip(acc.turns, acc.turns[1:])
                   if not b.expired and b.cached_messages < a.messages - 1)
    assert warm_breaks(aware) < warm_breaks(blind)
    assert aware.billed(0.1) < blind.billed(0.1)
    assert aware_mem.cache_accounting().expired == 5  # the memory's own meter knows the ttl


def test_peek_leaves_the_clock_and_the_prefix_alone():
    mem = ChatMemory(300, scorer="idf", prefix_cache=PrefixCacheOptions(ttl=300))
    for message, at in _sessions(2)[:20]:
        mem.add(message, at=at)
        mem.compress()
    before = mem._window.compactions
    mem.peek(at=10**7)
    assert mem._window.compactions == before and mem._window._last_at == _sessions(2)[19][1]
