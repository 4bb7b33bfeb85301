"""PackedEncoder: equal to SentenceTransformer.encode, packing invariants, masks, pooling."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.embedding.encoder import PackedEncoder, choose_rows
from ctxkit.embedding.model import load_backbone, resolve_dtype
from ctxkit.embedding.ops import (
    POOLING_MODES,
    additive_mask,
    block_mask,
    build_batch,
    pool_segments,
    varlen_attention_reference,
    varlen_inputs,
)
from ctxkit.errors import InputError, OptionError
from ctxkit.packing.plan import pack_lengths

torch.set_num_threads(min(2, torch.get_num_threads()))

_WORDS = ("the model packs short documents into rows so that no token is wasted on padding; "
         "def f(x): return x * 2  # code, numbers 12345, ünïcödé 日本語 emoji 🙂 and tabs\t")
WORDS = _WORDS.split()


def make_texts(n: int, seed: int = 0) -> list[str]:
    """Varied lengths: one-word, sentence, paragraph, and over max_seq_length (256 tokens)."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([1, 3, 8, 20, 45, 90, 400], size=n, p=[.2, .2, .2, .15, .1, .1, .05])
    return [" ".join(rng.choice(WORDS, size=k)) for k in lengths]


EDGE = ["", "   ", "\n\t", "a", "Hello   World  ", "x " * 600, "🙂" * 300, "ok\x00nul"]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    from ctxkit.io.tokenizers import minilm_path

    return SentenceTransformer(str(minilm_path()), device="cpu")


@pytest.fixture(scope="module")
def enc():
    return PackedEncoder(device="cpu")


def min_cos(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


# ---- fidelity against sentence-transformers -------------------------------------------------

def test_matches_sentence_transformers(enc, st_model):
    texts = make_texts(24) + EDGE
    ref = st_model.encode(texts, batch_size=32)
    got = enc.encode(texts)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert min_cos(got, ref) >= 0.9999
    assert np.abs(got - ref).max() < 1e-4
    s = enc.last_stats
    over = sum(len(enc.backbone.tokenizer(t)["input_ids"]) > enc.max_seq_length for t in texts)
    assert s.texts == len(texts) and s.empty == 3 and s.truncated == over >= 1
    assert 0 < s.utilization <= 1 and s.rows >= 1 and s.slots >= s.tokens


@pytest.mark.parametrize("row_length", [32, 64, 256])
def test_fixed_row_lengths_match(enc, st_model, row_length):
    texts = make_texts(8, seed=row_length) + EDGE[:4]
    ref = st_model.encode(texts, batch_size=8)
    e = PackedEncoder(device="cpu", row_length=row_length, batch_tokens=600)
    assert min_cos(e.encode(texts), ref) >= 0.9999


def test_tokenization_equals_sentence_transformers(enc, st_model):
    texts = make_texts(20, seed=3) + EDGE
    feats = st_model.preprocess(texts) if hasattr(st_model, "preprocess") else \
        st_model.tokenize(texts)
    tk = enc.tokenize(texts)
    for i in range(len(texts)):
        want = feats["input_ids"][i][feats["attention_mask"][i].bool()].tolist()
        got = tk.ids[tk.offsets[i]:tk.offsets[i] + tk.lengths[i]].tolist()
        assert got == want, i
    assert tk.lengths.max() <= enc.max_seq_length
    assert tk.empty == 3
    assert tk.truncated == sum(
        len(enc.backbone.tokenizer(t)["input_ids"]) > enc.max_seq_length for t in texts)


def test_order_duplicates_and_small_batches(enc):
    texts = make_texts(16, seed=5)
    base = enc.encode(texts)
    perm = np.random.default_rng(1).permutation(len(texts))
    shuffled = enc.encode([texts[i] for i in perm], batch_tokens=300)  # many forwards
    np.testing.assert_allclose(shuffled, base[perm], atol=2e-5)
    dup = enc.encode([texts[0], texts[0], texts[1]])
    np.testing.assert_allclose(dup[0], dup[1], atol=2e-5)


def test_empty_input_and_bad_input(enc):
    assert enc.encode([]).shape == (0, enc.dim)
    assert enc.last_stats.texts == 0
    with pytest.raises(InputError, match="got one str; wrap a single text in a list"):
        enc.encode("just one string")
    with pytest.raises(InputError, match="text 1 of texts is int"):
        enc.encode(["ok", 3])
    with pytest.raises(ValueError, match="batch_tokens"):
        enc.encode(["x"], batch_tokens=-1)
    with pytest.raises(ValueError, match="attention"):
        PackedEncoder(device="cpu", attention="flex")
    with pytest.raises(ValueError, match="batch_tokens must be a positive integer, got 0"):
        PackedEncoder(device="cpu", batch_tokens=0)
    with pytest.raises(TypeError, match="max_tokens_per_batch"):
        PackedEncoder(device="cpu", max_tokens_per_batch=512)
    with pytest.raises(OptionError, match=r"^device 'tpu' is unknown; use auto, cpu, cuda"):
        PackedEncoder(device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^device 'cuda' needs CUDA, which this machine"):
            PackedEncoder(device="cuda")
    with pytest.raises(ValueError, match="not found"):
        PackedEncoder("/nonexistent/model/dir")
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("float8", torch.device("cpu"))


def test_normalize_switch(enc):
    texts = make_texts(6, seed=9)
    raw = enc.encode(texts, normalize=False)
    norms = np.linalg.norm(raw, axis=1)
    assert not np.allclose(norms, 1.0)
    np.testing.assert_allclose(raw / norms[:, None], enc.encode(texts), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(enc.encode(texts, normalize=True), axis=1), 1,
                               atol=1e-5)


def test_model_is_cached_and_loaded_model_accepted(st_model):
    a, b = PackedEncoder(device="cpu"), PackedEncoder(device="cpu")
    assert a.backbone is b.backbone
    c = PackedEncoder(st_model, device="cpu")
    assert c.backbone.model is st_model and c.dim == 384


@pytest.mark.parametrize("mode", ["cls", "max", ("mean", "max"), "weightedmean", "lasttoken",
                                  "mean_sqrt_len_tokens"])
def test_pooling_modes_from_the_model(st_model, mode):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    custom = SentenceTransformer(modules=[st_model[0], Pooling(384, pooling_mode=mode)],
                                 device="cpu")
    texts = make_texts(6, seed=11) + ["", "a"]
    ref = custom.encode(texts, batch_size=4)
    e = PackedEncoder(custom, device="cpu")
    assert e.backbone.pooling == ((mode,) if isinstance(mode, str) else mode)
    assert not e.backbone.normalizes
    assert min_cos(e.encode(texts), ref) >= 0.9999


def test_hf_forward_path_with_additive_mask(st_model):
    """The generic path (transformers' own forward, 4D float mask) used for non-BERT encoders."""
    e = PackedEncoder(st_model, device="cpu")
    e.backbone.kind = "hf"
    texts = make_texts(10, seed=13) + ["", "b"]
    assert min_cos(e.encode(texts), st_model.encode(texts)) >= 0.9999


def test_varlen_path_matches_block_path(enc):
    """The GPU path's padding-free varlen layout (cu_seqlens), run with the reference kernel."""
    texts = make_texts(8, seed=17) + EDGE[:3]
    e = PackedEncoder(device="cpu", attention="varlen")
    assert e.attention == "varlen"
    np.testing.assert_allclose(e.encode(texts), enc.encode(texts), atol=2e-5)
    assert e.last_stats.slots == e.last_stats.tokens  # no padding computed


def test_half_precision_runs_on_cpu(enc):
    """bf16 weights, masks and fp32 pooling: the GPU dtype handling, exercised on CPU."""
    texts = ["a short text in bf16", "", "the same weights, half the bits"]
    e = PackedEncoder(device="cpu", dtype="bfloat16")
    assert e.dtype == torch.bfloat16 and e.backbone is not enc.backbone
    got = e.encode(texts)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    assert min_cos(got, enc.encode(texts)) > 0.99


def test_fast_dtype_is_bf16_only_where_the_hardware_multiplies_it(monkeypatch):
    from ctxkit.embedding import model

    cpu = torch.device("cpu")
    monkeypatch.setattr(model, "native_bf16_cpu", lambda: True)
    assert resolve_dtype("fast", cpu) == torch.bfloat16
    assert resolve_dtype("auto", cpu) == torch.float32  # auto stays exact on CPU
    monkeypatch.setattr(model, "native_bf16_cpu", lambda: False)
    assert resolve_dtype("fast", cpu) == torch.float32
    # the same weights in memory when "fast" resolves to fp32
    assert PackedEncoder(device="cpu", dtype="fast").backbone is \
        PackedEncoder(device="cpu").backbone
    if torch.cuda.is_available():
        assert resolve_dtype("fast", torch.device("cuda")) == resolve_dtype("auto",
                                                                         torch.device("cuda"))
    monkeypatch.undo()
    assert isinstance(model.native_bf16_cpu(), bool)


def test_fast_dtype_ranks_as_fp32_does(enc):
    """The ``fast`` encoder (bf16 on CPUs with native bf16): vectors within cosine 0.999 of
    fp32's, and a text's cosine to a query moved by under 0.005."""
    from ctxkit.embedding.vectors import ranking_encoder

    texts = make_texts(40, seed=3) + ["the violin concert", "a violin recital", "tax forms"]
    exact, fast = enc.encode(texts), ranking_encoder().encode(texts)
    assert min_cos(exact, fast) > 0.999
    query = exact[-3]
    np.testing.assert_allclose(fast @ fast[-3] / np.linalg.norm(fast, axis=1) /
                               np.linalg.norm(fast[-3]),
                               exact @ query / np.linalg.norm(exact, axis=1) /
                               np.linalg.norm(query), atol=5e-3)


def test_chunked_overlapped_tokenization(enc):
    texts = make_texts(15, seed=23)
    want = enc.encode(texts)
    e = PackedEncoder(device="cpu", overlap=True, chunk_size=4)
    seen = []
    got = e.encode(texts, progress=seen.append)
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert seen == [4, 8, 12, 15] and e.last_stats.texts == 15


# ---- packing layout, masks, pooling (pure functions) ----------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.sampled_from([40, 64, 100]))
def test_build_batch_places_every_token_once(lengths, capacity):
    lengths = np.array(lengths)
    offsets = np.cumsum(lengths) - lengths
    flat = np.arange(1, lengths.sum() + 1)  # token ids are unique, pad id is 0
    bins = pack_lengths(lengths, capacity=capacity).bins
    b = build_batch(flat, offsets, lengths, bins, capacity)
    assert b.input_ids.shape == (len(bins) * capacity,)
    assert sorted(b.input_ids[b.input_ids > 0].tolist()) == flat.tolist()
    assert (b.segment_ids >= 0).sum() == lengths.sum()
    for j, doc in enumerate(b.docs):
        s, n = b.starts[j], lengths[doc]
        assert b.input_ids[s:s + n].tolist() == flat[offsets[doc]:offsets[doc] + n].tolist()
        assert b.position_ids[s:s + n].tolist() == list(range(n))
        assert (b.segment_ids[s:s + n] == j).all()
        assert s // capacity == (s + n - 1) // capacity  # never crosses a row
    assert (b.input_ids[b.segment_ids < 0] == 0).all()


def test_build_batch_rejects_overfull_rows():
    with pytest.raises(ValueError, match="capacity"):
        build_batch(np.arange(10), np.array([0, 5]), np.array([5, 5]), [np.array([0, 1])], 8)


def test_masks_are_block_diagonal():
    seg = torch.tensor([0, 0, 1, 1, 1, -1, 2, 2, 3, -1, -1, -1])
    m = block_mask(seg, 2, 6)[:, 0]
    s = seg.view(2, 6)
    for r in range(2):
        for i in range(6):
            for j in range(6):
                assert bool(m[r, i, j]) == bool(s[r, i] == s[r, j])
    assert m.any(-1).all()  # no fully masked query row, even on padding
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a = additive_mask(seg, 2, 6, dtype)
        assert a.dtype == dtype
        assert (a[:, 0][m] == 0).all() and (a[:, 0][~m] == torch.finfo(dtype).min).all()


def test_block_attention_equals_per_document_attention():
    torch.manual_seed(0)
    lengths = np.array([3, 5, 2, 6])
    b = build_batch(np.arange(16), np.cumsum(lengths) - lengths, lengths,
                    [np.array([0, 1]), np.array([2, 3])], 9)
    seg = torch.from_numpy(b.segment_ids)
    q, k, v = (torch.randn(2, 4, 9, 8) for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=additive_mask(seg, 2, 9, torch.float32))
    for j in range(len(b.docs)):
        r, s = divmod(int(b.starts[j]), 9)
        n = int(b.lengths[j])
        sl = slice(s, s + n)
        want = torch.nn.functional.scaled_dot_product_attention(q[r:r + 1, :, sl],
                                                                k[r:r + 1, :, sl],
                                                                v[r:r + 1, :, sl])
        torch.testing.assert_close(out[r:r + 1, :, sl], want, atol=1e-5, rtol=1e-5)


def test_varlen_inputs_and_reference_kernel():
    cu, mx = varlen_inputs(np.array([2, 4, 1]))
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 2, 6, 7] and mx == 4
    q, k, v = (torch.randn(7, 3, 8) for _ in range(3))
    out = varlen_attention_reference(q, k, v, cu, mx)
    want = torch.nn.functional.scaled_dot_product_attention(
        q[2:6].transpose(0, 1), k[2:6].transpose(0, 1), v[2:6].transpose(0, 1)).transpose(0, 1)
    torch.testing.assert_close(out[2:6], want)
    with pytest.raises(ValueError, match="max_seqlen"):
        varlen_attention_reference(q, k, v, cu, 3)


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_pool_segments_matches_per_document_pooling(mode):
    torch.manual_seed(1)
    lengths = np.array([3, 1, 4, 2])
    b = build_batch(np.arange(1, 11), np.cumsum(lengths) - lengths, lengths,
                    [np.array([0, 1]), np.array([2, 3])], 6)
    hidden = torch.randn(b.n_slots, 5)
    got = pool_segments(hidden, torch.from_numpy(b.segment_ids),
                        torch.from_numpy(b.position_ids), torch.from_numpy(b.starts),
                        torch.from_numpy(b.lengths), [mode])
    for j in range(len(b.docs)):
        s, n = int(b.starts[j]), int(b.lengths[j])
        x = hidden[s:s + n]
        w = torch.arange(1, n + 1, dtype=torch.float32).unsqueeze(1)
        want = {"cls": x[0], "lasttoken": x[-1], "max": x.max(0).values, "mean": x.mean(0),
                "mean_sqrt_len_tokens": x.sum(0) / n ** 0.5,
                "weightedmean": (x * w).sum(0) / w.sum()}[mode]
        torch.testing.assert_close(got[j], want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        pool_segments(hidden, torch.from_numpy(b.segment_ids), torch.from_numpy(b.position_ids),
                      torch.from_numpy(b.starts), torch.from_numpy(b.lengths), ["median"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 256), min_size=1, max_size=60))
def test_choose_rows_places_every_text_once(lengths):
    lengths = np.array(lengths)
    groups = choose_rows(lengths, 256, 384)
    placed = np.concatenate([np.concatenate(bins) for _, bins in groups])
    assert sorted(placed.tolist()) == list(range(len(lengths)))
    for cap, bins in groups:
        assert cap <= 256
        assert all(lengths[b].sum() <= cap for b in bins)


def test_choose_rows_cost_model():
    # Attention counted in FLOPs (default): short texts go into short rows.
    assert {c for c, _ in choose_rows(np.full(200, 12), 256, 384)} <= {32, 64}
    assert choose_rows(np.full(50, 250), 256, 384)[0][0] == 256
    # Without attention cost, the tightest packing (longest rows) wins.
    assert [c for c, _ in choose_rows(np.full(200, 12), 256, 384, attn_weight=0.0)] == [256]
    mixed = choose_rows(np.array([200] * 5 + [20] * 60), 256, 384, attn_weight=8.0)
    caps = sorted(c for c, _ in mixed)
    assert len(caps) == 2 and caps[0] < 200 and caps[1] == 256  # long texts keep max_len rows
    assert choose_rows(np.array([]), 256, 384) == []
    assert [c for c, _ in choose_rows(np.array([5, 9]), 256, 384, row_length=128)] == [128]
    with pytest.raises(ValueError):
        choose_rows(np.array([5]), 256, 384, row_length=0)


def test_backbone_reads_model_settings():
    bb = load_backbone(None, "cpu", "auto")
    assert bb.kind == "fused" and bb.max_seq_length == 256 and bb.pooling == ("mean",)
    assert bb.normalizes and bb.dtype == torch.float32 and bb.dim == 384


def test_embed_options_one_source(enc):
    from ctxkit.embedding.options import EmbedOptions

    texts = make_texts(6, seed=31)
    opts = EmbedOptions(device="cpu", batch_tokens=700, chunk_size=3, normalize=False)
    e = PackedEncoder(options=opts)
    assert e.options == opts and e.batch_tokens == 700
    got = e.encode(texts)
    np.testing.assert_array_equal(got, PackedEncoder(device="cpu", batch_tokens=700,
                                                     chunk_size=3).encode(texts, normalize=False))
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)  # options.normalize applied
    for bad, message in [(dict(dtype="float8"), "dtype 'float8' is unknown"),
                         (dict(chunk_size=0), "chunk_size must be a positive integer"),
                         (dict(batch_tokens=10**12), "batch_tokens must be at most"),
                         (dict(row_length="long"), "row_length must be a positive integer"),
                         (dict(normalize="yes"), "normalize must be True, False or None")]:
        with pytest.raises(ValueError, match=message):
            EmbedOptions(**bad)
        with pytest.raises(ValueError, match=message):
            PackedEncoder(**bad)
