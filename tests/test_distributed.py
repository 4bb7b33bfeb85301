"""ctxkit.distributed on a local 2-CPU Ray instance: equal to the single-machine results.

Ray starts once per session (about 10 s); each test runs a handful of small Ray Data
pipelines. The cheap task-based sort shuffle is the session default; one test runs the
hash-shuffle path (Ray's default at scale), which starts aggregator actors and costs more.
"""

from __future__ import annotations

import builtins
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

# Ray's own DataContext copies touch deprecated settings; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from ctxkit.distributed import (  # noqa: E402
    RayMissingError,
    WorkerInputError,
    embed,
    minhash_dedup,
    pack,
    pair_similarity,
    require_ray,
    window_utilization,
    with_row_index,
)
from ctxkit.distributed.blocks import expand_ranges  # noqa: E402
from ctxkit.packing.plan import pack_lengths  # noqa: E402


def _near_duplicate_corpus(n: int = 160, seed: int = 0) -> list[str]:
    """Base documents plus edited copies (word swaps, case and punctuation noise)."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(400)] + ["naïve", "café", "日本語", "emoji🙂"]
    bases = [" ".join(rng.choice(words, int(rng.integers(20, 60)))) for _ in range(n // 4)]
    texts = []
    for _ in range(n):
        w = bases[int(rng.integers(len(bases)))].split()
        for _ in range(int(rng.integers(0, 6))):
            w[int(rng.integers(len(w)))] = str(rng.choice(words))
        t = " ".join(w)
        texts.append(t.upper() if rng.random() < 0.1 else t + ("!" if rng.random() < 0.2 else ""))
    # Edge cases: empty texts never match, one-word texts match each other, a huge text.
    return texts + ["", "", "hello", "hello", "x" * 20000]


# ---------------------------------------------------------------- plumbing (no Ray needed)


def test_missing_ray_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    for mod in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, mod)
    with pytest.raises(RayMissingError, match=r"ctxkit\[ray\]"):
        require_ray()


def test_expand_ranges_matches_python():
    lo, hi = np.array([3, 0, 5, 7]), np.array([6, 0, 5, 9])
    values, owner = expand_ranges(lo, hi)
    want = [(v, i) for i, (a, b) in enumerate(zip(lo, hi)) for v in range(a, b)]
    assert list(zip(values.tolist(), owner.tolist())) == want


@pytest.fixture
def no_ray_start(monkeypatch):
    """Ray must not start: every check of the output runs before it."""
    import ctxkit.distributed.command as command

    def refuse(*args, **kwargs):
        raise AssertionError("Ray started before the output was checked")

    monkeypatch.setattr(command, "init_ray", refuse)


def test_ray_output_is_checked_before_ray_starts(no_ray_start, tmp_path, capsys):
    from ctxkit.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a b c"}\n')
    (tmp_path / "plain").mkdir()
    (tmp_path / "full.parquet").mkdir()
    (tmp_path / "full.parquet" / "x.parquet").write_bytes(b"")
    (tmp_path / "afile").write_text("")
    pack = ["pack", src, "-c", 64]
    for args, message in [
        ([*pack, "-o", tmp_path / "out.txt"], "-o must end in .jsonl or .parquet, got out.txt"),
        ([*pack, "-o", tmp_path / "out.json"], "-o must end in .jsonl or .parquet"),
        ([*pack, "-o", tmp_path / "plain"], "is a directory; name a file ending in .jsonl or "
                                            ".parquet, or a directory ending in"),
        ([*pack, "-o", tmp_path / "full.parquet"], "is a directory that is not empty"),
        ([*pack, "-o", tmp_path / "afile" / "out.jsonl"], "is a file, not a directory"),
        ([*pack, "-o", src], "is the input file"),
        ([*pack, "-o", tmp_path / "o.jsonl", "--report", tmp_path / "o.jsonl"],
         "would overwrite the output"),
        (["pack", tmp_path / "missing.jsonl", "-c", 64, "-o", tmp_path / "o.jsonl"],
         "input file not found"),
        (["dedup", src, "-o", tmp_path / "k.npy", "--method", "minhash"],
         "-o must end in .jsonl or .parquet"),
        (["dedup", src, "-o", tmp_path / "k.jsonl", "--method", "exact"], "only --method"),
        (["embed", src, "-o", tmp_path / "v.jsonl"], "-o must end in .npy or .parquet"),
        (["embed", src, "-o", "s3://bucket/v.npy"], "is a URI: it must end in .parquet"),
    ]:
        code = main([str(a) for a in args] + ["--ray", "local"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "full.parquet", "in.jsonl",
                                                          "plain"]


def test_join_parts_streams_parquet_parts_into_one_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctxkit.distributed.output import join_parts

    parts = tmp_path / "parts"
    parts.mkdir()
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), parts / "0.parquet")
    pq.write_table(pa.table({"a": [3], "b": pa.array([None], pa.null())}), parts / "1.parquet")
    (parts / "_SUCCESS").write_text("")  # not a part
    assert join_parts(parts, tmp_path / "out.parquet", "parquet") == 2
    got = pq.read_table(tmp_path / "out.parquet")
    assert got.to_pydict() == {"a": [1, 2, 3], "b": ["x", "y", None]}
    empty = tmp_path / "none"
    empty.mkdir()
    schema = pa.schema([("window", pa.int64())])
    assert join_parts(empty, tmp_path / "e.parquet", "parquet", schema=schema) == 0
    assert pq.read_table(tmp_path / "e.parquet").schema == schema
    assert join_parts(empty, tmp_path / "e.jsonl", "json") == 0
    assert (tmp_path / "e.jsonl").read_bytes() == b""


def test_a_failed_ray_write_keeps_the_previous_output(tmp_path):
    from ctxkit.distributed.output import check_output, write_dataset

    class Failing:
        def write_json(self, target):
            (Path(target) / "0.json").write_text('{"x": 1}\n')
            raise RuntimeError("worker lost")

    out = tmp_path / "out.jsonl"
    out.write_text("previous\n")
    with pytest.raises(RuntimeError, match="worker lost"):
        write_dataset(Failing(), check_output(out, (".jsonl",)))
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]  # no part files left


def test_line_ranges_cut_whole_lines(tmp_path):
    from ctxkit.distributed.reader import line_ranges, parse_range

    lines = [f'{{"t": "{"x" * (i % 7)}", "i": {i}}}' for i in range(50)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]))  # a blank line,
    for size in (1, 17, 64, 10**6):                                           # no final newline
        ranges = line_ranges(path, size)
        assert ranges[0][0] == 0 and ranges[-1][1] == path.stat().st_size
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        got = [r for lo, hi in ranges for r in parse_range(path, lo, hi).to_pylist()]
        assert [r["i"] for r in got] == list(range(50))


@pytest.mark.parametrize("compiled", [True, False])
def test_stage_functions_score_as_one_machine(monkeypatch, compiled):
    """The worker functions on plain arrays: routed estimates and exact scores equal the
    single-machine ones, pairs in any order and from several chunks (numba or numpy)."""
    import pyarrow as pa

    from ctxkit.deduplication import kernels

    if not compiled:
        monkeypatch.setattr(kernels, "NUMBA", False)

    from ctxkit.deduplication.jaccard import exact_pair_jaccard
    from ctxkit.deduplication.signatures import signatures
    from ctxkit.deduplication.verify import estimate_jaccard
    from ctxkit.distributed import stages

    texts = _near_duplicate_corpus(60, seed=2)
    params = {"num_perm": 32, "seed": 1}
    cut = [0, 25, len(texts)]
    chunks = [stages.prepare_chunk(a, "text", params, 8, 4, None, pa.table({"text": texts[a:b]}))
              for a, b in zip(cut, cut[1:])]
    pairs = np.random.default_rng(1).integers(0, len(texts), (300, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    codes = np.unique(stages.encode(pairs))
    starts = np.array(cut)
    asked = stages.requests(codes, starts)
    sig = [stages.serve_signatures(a, c.sig, r)[0] for a, c, r in zip(cut, chunks, asked)]
    kept, _ = stages.score_estimates(-1.0, starts, codes, *sig)
    np.testing.assert_array_equal(kept["estimate"], estimate_jaccard(
        signatures(texts, **params), stages.decode(codes)))
    served = [stages.serve_shingles(a, c.table, "text", {}, r)[0]
              for a, c, r in zip(cut, chunks, asked)]
    np.testing.assert_array_equal(stages.score_exact(codes, *served),
                                  exact_pair_jaccard(texts, stages.decode(codes)))


# ---------------------------------------------------------------- row numbers


def test_row_index_follows_dataset_order_across_blocks(ray_session):
    ds = ray.data.from_items([{"t": str(i)} for i in range(97)], override_num_blocks=7)
    rows = with_row_index(ds.map_batches(lambda b: b, batch_format="numpy")).take_all()
    assert [r["_row"] for r in rows] == list(range(97))
    assert all(int(r["t"]) == r["_row"] for r in rows)


# ---------------------------------------------------------------- MinHash dedup


@pytest.mark.parametrize(("threshold", "keep"), [(0.5, "first"), (0.8, "longest")])
def test_minhash_dedup_equals_single_machine(ray_session, threshold, keep):
    from ctxkit.deduplication.pipeline import dedup

    texts = _near_duplicate_corpus()
    ids = [f"doc-{i}" for i in range(len(texts))]
    ds = ray.data.from_items([{"text": t, "id": i} for t, i in zip(texts, ids)],
                             override_num_blocks=5)
    out = minhash_dedup(ds, threshold=threshold, keep=keep, id_column="id", seed=3,
                        num_partitions=3)
    ref = dedup(texts, method="minhash", threshold=threshold, keep=keep, seed=3)
    got = out.result
    assert ref.n_removed > 20  # the corpus really has near-duplicates
    np.testing.assert_array_equal(got.duplicate_of, ref.duplicate_of)
    np.testing.assert_array_equal(got.keep, ref.keep)
    np.testing.assert_array_equal(got.pairs, ref.pairs)
    np.testing.assert_allclose(got.pair_scores, ref.pair_scores)
    np.testing.assert_allclose(got.similarity, ref.similarity, equal_nan=True)
    assert got.clusters == ref.clusters
    assert out.info["candidates"] == ref.info["minhash"]["candidates"]
    # The datasets: kept rows in their columns, and one report row per removed row.
    kept = out.kept.take_all()
    assert sorted(r["id"] for r in kept) == sorted(ids[i] for i in ref.keep)
    assert set(kept[0]) == {"text", "id"}
    report = sorted(out.report.take_all(), key=lambda r: r["row"])
    ledger = ref.ledger(ids=ids)
    assert [(r["id"], r["duplicate_of"], r["method"]) for r in report] == \
        [(e["id"], e["duplicate_of"], e["method"]) for e in ledger]
    assert [r["similarity"] for r in report] == pytest.approx([e["similarity"] for e in ledger])
    assert len(kept) + len(report) == len(texts)  # no row lost


def test_minhash_dedup_templated_records_equal_single_machine(ray_session, monkeypatch):
    """Records sharing a tool-description template fill LSH buckets far beyond max_bucket:
    the hub stars and the verification rounds must come out as on one machine."""
    import ctxkit.deduplication.linking as linking
    from ctxkit.deduplication.pipeline import dedup

    monkeypatch.setattr(linking, "FIRST_ROUND", 8)  # several rounds on a small corpus
    rng = np.random.default_rng(5)
    template = ("toolformer: enabled\ntoolformer access: weather\nUseful for when you want "
                "to get weather information from the OpenMeteo API.\nweather(query)\n")
    cities = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Quito", "Perth", "Dakar"]
    texts = [template + f"Give the weather in {rng.choice(cities)} on day {int(d)}"
             for d in rng.integers(0, 12, 150)]
    ds = ray.data.from_items([{"text": t} for t in texts], override_num_blocks=4)
    out = minhash_dedup(ds, threshold=0.8, max_bucket=4, num_partitions=3)
    ref = dedup(texts, method="minhash", threshold=0.8, max_bucket=4)
    assert ref.info["minhash"]["candidates"] < len(texts) * ref.info["minhash"]["bands"] * 2
    np.testing.assert_array_equal(out.result.duplicate_of, ref.duplicate_of)
    np.testing.assert_array_equal(out.result.pairs, ref.pairs)
    np.testing.assert_allclose(out.result.pair_scores, ref.pair_scores)
    assert out.info["candidates"] == ref.info["minhash"]["candidates"]


def test_minhash_dedup_scores_and_row_ids(ray_session):
    from ctxkit.deduplication.pipeline import dedup

    texts = _near_duplicate_corpus(80, seed=1)
    scores = np.random.default_rng(2).random(len(texts))
    ds = ray.data.from_items([{"text": t, "s": float(s)} for t, s in zip(texts, scores)],
                             override_num_blocks=3)
    out = minhash_dedup(ds, threshold=0.6, score_column="s", num_perm=64)
    ref = dedup(texts, method="minhash", threshold=0.6, scores=scores, num_perm=64)
    np.testing.assert_array_equal(out.result.duplicate_of, ref.duplicate_of)
    report = out.report.take_all()
    assert sorted(r["id"] for r in report) == ref.removed.tolist()  # row numbers as ids


def test_pair_similarity_on_the_hash_shuffle_path(ray_session):
    """Ray's default hash shuffle (aggregator actors): every group stays whole."""
    from ray.data.context import ShuffleStrategy

    from ctxkit.deduplication.signatures import signatures
    from ctxkit.deduplication.verify import estimate_jaccard

    texts = _near_duplicate_corpus(60, seed=4)
    sig = signatures(texts, num_perm=32, seed=1)
    sig_ds = ray.data.from_items([{"_row": i, "sig": s} for i, s in enumerate(sig)],
                                 override_num_blocks=3)
    sig_ds.context.shuffle_strategy = ShuffleStrategy.SHUFFLE_V2
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, len(texts), (200, 2))
    got = pair_similarity(sig_ds, pairs, num_partitions=2)
    np.testing.assert_array_equal(got, estimate_jaccard(sig, pairs))


def test_minhash_dedup_errors(ray_session):
    # Non-UTF-8 bytes are not text: the error names the row instead of guessing a decoding.
    ds = ray.data.from_items([{"text": b"\xff\xfe bytes"}, {"text": b"fine"}])
    with pytest.raises(Exception, match=r"row 0: column 'text' must hold text, got bytes"):
        minhash_dedup(ds)
    with pytest.raises(ValueError, match="not a column"):
        minhash_dedup(ds, column="body")
    with pytest.raises(ValueError, match="threshold"):
        minhash_dedup(ds, threshold=1.5)
    with pytest.raises(ValueError, match="num_perm"):
        minhash_dedup(ds, num_perm=0)
    with pytest.raises(TypeError, match="unknown MinHash option"):
        minhash_dedup(ds, num_perms=64)
    with pytest.raises(ValueError, match="boilerplate"):
        minhash_dedup(ds, boilerplate=0.01)
    empty = minhash_dedup(ray.data.from_items([{"text": "x"}]).filter(lambda r: False))
    assert empty.result.n == 0 and empty.report.count() == 0


# ---------------------------------------------------------------- packing


def _token_dataset(lengths, blocks=4):
    seqs = [list(range(1000 * i, 1000 * i + int(n))) for i, n in enumerate(lengths)]
    ds = ray.data.from_items([{"input_ids": s, "n": int(n)} for s, n in zip(seqs, lengths)],
                             override_num_blocks=blocks)
    return ds, seqs


def _windows_table(out):
    """Every window of a DistributedPack as one Arrow table in window order."""
    import pyarrow as pa

    return pa.concat_tables(ray.get(out.windows.to_arrow_refs())).sort_by("window")


@pytest.mark.parametrize("options", [
    dict(),
    dict(separator_id=0, overflow="split", seed=3, layout="flat"),
    dict(separator_id=5, overflow="truncate", strategy="wrapped", pad_id=9),
    dict(separator_id=2, overflow="drop", strategy="greedy", label_separators=True, seed=1,
         layout="flat"),
])
def test_pack_global_equals_local_pack(ray_session, options):
    """Same sequences, same options: the windows of ctxkit.pack, column for column."""
    from ctxkit.packing.collate import pack as local_pack
    from ctxkit.packing.hf import packed_table

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 300, 240)
    lengths[[5, 17]] = 0
    lengths[[3, 40]] = [900, 513]  # over capacity: split, truncated or dropped
    if not options.get("overflow"):
        lengths[[3, 40]] = [400, 12]
    seqs = [rng.integers(1, 1000, int(n)).tolist() for n in lengths]
    masks = [(rng.random(int(n)) < 0.7).astype(int).tolist() for n in lengths]
    ds = ray.data.from_items([{"input_ids": s, "mask": m, "id": f"k{i}"}
                              for i, (s, m) in enumerate(zip(seqs, masks))],
                             override_num_blocks=4)
    out = pack(ds, 512, mask_column="mask", id_column="id", **options)
    got = _windows_table(out)
    batch = local_pack(seqs, capacity=512, completion_mask=masks, **options)
    want = packed_table(batch, ids=[f"k{i}" for i in range(len(seqs))])
    assert got.column("window").to_pylist() == list(range(want.num_rows))
    assert got.drop_columns(["window"]).equals(want)
    assert out.stats["windows"] == batch.n_windows and out.stats["tokens"] == batch.total_tokens
    skipped = {(s["row"], s["reason"]) for s in out.skipped.take_all()}
    assert skipped >= {(5, "empty"), (17, "empty")}
    assert {r for r, why in skipped if why == "over capacity"} == set(batch.dropped.tolist())


def test_pack_lengths_only_lists_the_plan(ray_session):
    lengths = np.random.default_rng(0).integers(0, 300, 400)
    ds, _ = _token_dataset(lengths)
    plan = pack_lengths(lengths, capacity=512, seed=2)
    got = _windows_table(pack(ds, 512, column="n", seed=2))
    assert got.column("source_ids").to_pylist() == [b.tolist() for b in plan.bins]
    assert got.column("seq_lengths").to_pylist() == [lengths[b].tolist() for b in plan.bins]


def test_pack_per_block_places_every_row_once(ray_session):
    lengths = np.random.default_rng(1).integers(1, 200, 300)
    ds, seqs = _token_dataset(lengths, blocks=6)
    out = pack(ds, 256, column="input_ids", mode="block", separator_id=0, layout="flat")
    windows = out.windows.take_all()
    rows = sorted(r for w in windows for r in w["source_ids"])
    assert rows == list(range(len(lengths)))
    assert len({w["window"] for w in windows}) == len(windows)
    for w in windows:  # each window: its rows' tokens, each followed by the separator
        assert list(w["input_ids"]) == [t for r in w["source_ids"] for t in seqs[r] + [0]]
        assert sum(w["seq_lengths"]) == len(w["input_ids"]) <= 256
    block = window_utilization(out.windows, 256)
    glob = pack_lengths(lengths + 1, capacity=256)
    assert block["tokens"] == glob.total_tokens
    assert block["windows"] >= glob.n_bins  # per-block packing never beats the global plan
    with pytest.raises(ValueError, match="mode='block' keeps each window inside one block"):
        pack(ds, 256, mode="block", overflow="split")


def test_pack_overflow_and_options(ray_session):
    ds, _ = _token_dataset([10, 600, 20], blocks=1)
    with pytest.raises(ValueError, match=r"^row 1 has 600 tokens, more than capacity 512; 1 "):
        pack(ds, 512, mode="global")
    with pytest.raises(ValueError, match=r"^row 1 has 601 tokens"):  # the separator counts
        pack(ds, 600, mode="global", separator_id=0)
    with pytest.raises(ValueError, match=r"row 1 has 600 tokens"):  # from a worker, typed
        pack(ds, 512, mode="block").windows.take_all()
    cut = _windows_table(pack(ds, 512, overflow="truncate"))
    assert sorted(np.concatenate(cut.column("seq_lengths").to_pylist()).tolist()) == [10, 20, 512]
    dropped = pack(ds, 512, overflow="drop")
    assert [s["reason"] for s in dropped.skipped.take_all()] == ["over capacity"]
    with pytest.raises(ValueError, match="more than the 16,777,216 tokens a window can hold"):
        pack(ds, 10**12)
    with pytest.raises(ValueError, match="layout 'rows' is unknown"):
        pack(ds, 512, layout="rows")


# ---------------------------------------------------------------- embedding


class CharEncoder:
    """A tiny deterministic encoder with PackedEncoder's interface (character histograms)."""

    def __init__(self, model=None, device="cpu", dim=16):
        self.dim = dim

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for j, c in enumerate(t.encode("utf-8")):
                out[i, (c + j) % self.dim] += 1.0
        return out


@pytest.fixture(scope="module")
def picklable_tests():
    from ray import cloudpickle

    # The actors cannot import this test module: ship its classes by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_embed_writes_vectors_with_their_ids(ray_session, picklable_tests):
    texts = [f"text {i} " * (i % 5) for i in range(120)] + ["", "日本語 ünïcode"]
    ds = ray.data.from_items([{"text": t, "id": f"k{i}"} for i, t in enumerate(texts)],
                             override_num_blocks=3)
    want = CharEncoder().encode(texts)
    rows = embed(ds, id_column="id", encoder=CharEncoder, chunk_size=32, num_workers=1).take_all()
    got = {r["id"]: r["embedding"] for r in rows}
    assert len(got) == len(texts)
    np.testing.assert_array_equal(np.stack([got[f"k{i}"] for i in range(len(texts))]), want)


def test_embed_rejects_non_text(ray_session):
    from ctxkit.distributed.embedding import _EmbedActor

    # The actor's code, run in-process: a bad value is named by its id.
    actor = _EmbedActor(CharEncoder, {}, "text", "id", "embedding", None, None)
    batch = {"text": np.array(["ok", None], dtype=object), "id": np.array([1, 2]),
             "_row": np.array([0, 1]), "_chunk": np.array([0, 0])}
    with pytest.raises(WorkerInputError, match=r"id 2: column 'text' must hold text, got None"):
        actor(batch)
    good = {k: v[:1] for k, v in batch.items()}
    assert actor(good)["embedding"].shape == (1, 16)
    ds = ray.data.from_items([{"text": "ok", "id": 1}])
    with pytest.raises(ValueError, match="not in the dataset"):
        embed(ds, column="body", encoder=CharEncoder)


# ---------------------------------------------------------------- what `ctxkit ... --ray` runs


def test_run_command_refuses_before_and_names_the_record_after(ray_session, tmp_path):
    """What ``run_command`` checks before Ray reads anything, and a worker's error coming back
    as one line naming the record (its outputs are compared with the local command's in
    ``test_ray_parity.py``)."""
    import json

    from ctxkit.distributed import run_command

    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "body": f"text {i}"}) + "\n"
                           for i in range(5)))
    with pytest.raises(ValueError, match="only --method minhash"):
        run_command("dedup", "local", src, tmp_path / "x.jsonl", method="exact,minhash")
    with pytest.raises(ValueError, match=r"field\(s\) \['text'\] not in"):
        run_command("pack", "local", src, tmp_path / "w.parquet", capacity=64)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "body": "ok"}\n{"id": "b", "body": 5}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl \(row 1\) \(id b\): field 'body' is int, "
                                         r"not text$"):
        run_command("pack", "local", bad, tmp_path / "b.parquet", field="body", id_field="id")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "in.jsonl"]


def test_embed_parquet_parts_carry_id_vector_and_input_row():
    """``-o vectors.parquet`` on Ray: each part holds the local command's columns (``id`` with
    ``--ids``, ``embedding`` as a fixed-size list of float32) plus ``row``, the input row,
    since part files do not keep the input order. (The vectors themselves are compared with
    the local command's, bit for bit, in ``test_ray_parity.py``.)"""
    import pyarrow as pa

    from ctxkit.distributed.command import _vector_table

    batch = {"_row": np.array([4, 0, 2]), "id": np.array(["d4", "d0", "日本"], dtype=object),
             "embedding": np.arange(12, dtype=np.float64).reshape(3, 4)}
    table = _vector_table(batch, ids=True)
    assert table.column_names == ["id", "embedding", "row"]
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 4)
    assert table.column("id").to_pylist() == ["d4", "d0", "日本"]
    assert table.column("row").to_pylist() == [4, 0, 2]
    np.testing.assert_array_equal(np.array(table.column("embedding").to_pylist()),
                                  batch["embedding"].astype(np.float32))
    assert _vector_table(batch, ids=False).column_names == ["embedding", "row"]


def test_auto_shuffle_picks_sort_for_small_inputs(ray_session):
    from ray.data.context import ShuffleStrategy

    from ctxkit.distributed.blocks import AUTO_HASH_ROWS, set_shuffle

    ds = ray.data.from_items([{"x": 1}])
    set_shuffle(ds, "auto", 1000)
    assert ds.context.shuffle_strategy == ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    set_shuffle(ds, "auto", AUTO_HASH_ROWS)
    assert ds.context.shuffle_strategy == ShuffleStrategy.SHUFFLE_V2
    with pytest.raises(ValueError, match="shuffle must be one of"):
        set_shuffle(ds, "fast")


def test_cli_ray_option(ray_session, tmp_path, capsys):
    """`ctxkit pack ... --ray local -o FILE.jsonl` writes that one file; into an existing
    directory it writes the part files; a refused option exits 2."""
    import json

    from ctxkit.cli import main

    texts = _near_duplicate_corpus(40, seed=11)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    # the default methods include exact dedup, which Ray does not run: refused before it starts
    assert main(["dedup", str(src), "-o", str(tmp_path / "k2.jsonl"), "--ray", "local"]) == 2
    capsys.readouterr()
    assert main(["pack", str(src), "-c", "128", "-o", str(tmp_path / "w.jsonl"),
                 "--overflow", "truncate", "--ray", "local"]) == 0
    out = capsys.readouterr().out
    assert "ctxkit pack on Ray" in out
    # -o out.jsonl is the file written: one window per line, no part files left beside it
    windows = [json.loads(line) for line in (tmp_path / "w.jsonl").read_text().splitlines()]
    assert sorted(w["window"] for w in windows) == list(range(len(windows)))
    assert sorted(int(i) for w in windows for i in w["source_ids"]) == \
        [i for i, t in enumerate(texts) if t]  # empty texts are reported, not packed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "w.jsonl"]
    # an existing empty directory receives the part files themselves
    (tmp_path / "parts.parquet").mkdir()
    assert main(["pack", str(src), "-c", "128", "-o", str(tmp_path / "parts.parquet"),
                 "--overflow", "truncate", "--ray", "local"]) == 0
    assert "(part files)" in capsys.readouterr().out
    parts = sorted((tmp_path / "parts.parquet").glob("*.parquet"))
    assert parts and ray.data.read_parquet(str(tmp_path / "parts.parquet")).count() == \
        len(windows)
