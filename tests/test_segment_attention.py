"""Per-segment attention (ctxkit_segments) equals transformers' block-mask SDPA on packed
batches: logits, loss and gradients of a tiny Llama with several segments, grouped KV heads,
boundaries from positions or cu_seq_lens, and padding."""

from __future__ import annotations

import pytest

from ctxkit.training.segment_attention import (
    SEGMENT_ATTENTION,
    register_segment_attention,
    segment_spans,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (7, 19, 3, 19, 1, 11)  # two of equal length: one batched call


def _model(attn: str):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
        attn_implementation=attn)
    return transformers.LlamaForCausalLM(config).to(torch.float64)


@pytest.fixture(scope="module")
def models():
    return _model("sdpa"), _model(register_segment_attention())


@pytest.fixture(scope="module")
def packed():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (1, sum(LENGTHS)), generator=gen)
    pos = torch.cat([torch.arange(n) for n in LENGTHS])[None]
    labels = ids.clone()
    labels[0, torch.cumsum(torch.tensor((0,) + LENGTHS[:-1]), 0)] = -100
    cu = torch.cumsum(torch.tensor((0,) + LENGTHS), 0).to(torch.int32)
    return {"input_ids": ids, "position_ids": pos, "labels": labels}, cu


def _run(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs, use_cache=False)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), [p.grad.clone() for p in model.parameters()]


def _assert_same(a, b, tol=1e-10):
    (la, lossa, ga), (lb, lossb, gb) = a, b
    assert (la - lb).abs().max() <= tol
    assert abs(float(lossa - lossb)) <= tol
    assert max(float((x - y).abs().max()) for x, y in zip(ga, gb)) <= tol


def test_equals_block_mask_sdpa(models, packed):
    sdpa, seg = models
    inputs, _ = packed
    assert seg.config._attn_implementation == SEGMENT_ATTENTION
    _assert_same(_run(sdpa, inputs), _run(seg, inputs))


def test_boundaries_from_cu_seq_lens(models, packed):
    sdpa, seg = models
    inputs, cu = packed
    longest = max(LENGTHS)
    varlen = dict(inputs, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest,
                  max_length_k=longest)
    _assert_same(_run(sdpa, inputs), _run(seg, varlen))


def test_each_segment_equals_it_alone(models, packed):
    _, seg = models
    inputs, cu = packed
    with torch.no_grad():
        logits = seg(**inputs, use_cache=False).logits
        for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
            alone = seg(input_ids=inputs["input_ids"][:, a:b], use_cache=False).logits
            assert (logits[:, a:b] - alone).abs().max() <= 1e-10


def test_control_without_positions_segments_leak(models, packed):
    """Control: without restarting positions the whole row is one segment and logits change."""
    _, seg = models
    inputs, _ = packed
    with torch.no_grad():
        apart = seg(**inputs, use_cache=False).logits
        joined = seg(input_ids=inputs["input_ids"], use_cache=False).logits
    assert (apart - joined).abs().max() > 1e-3


def test_padded_rows_equal_sdpa(models):
    sdpa, seg = models
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 97, (3, 12), generator=gen)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, 9:], mask[2, 4:] = 0, 0
    labels = ids.masked_fill(mask == 0, -100)
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    (la, lossa, ga), (lb, lossb, gb) = _run(sdpa, inputs), _run(seg, inputs)
    real = mask.bool()
    assert (la - lb)[real].abs().max() <= 1e-10
    _assert_same((la[real], lossa, ga), (lb[real], lossb, gb))


def test_a_4d_mask_is_honoured(models, packed):
    sdpa, seg = models
    inputs, _ = packed
    n = inputs["input_ids"].shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    full = {"input_ids": inputs["input_ids"], "attention_mask": mask}
    with torch.no_grad():
        a = sdpa(**full, use_cache=False).logits
        b = seg(**full, use_cache=False).logits
    assert (a - b).abs().max() <= 1e-10


@pytest.mark.parametrize(("pos", "mask", "cu", "batch", "want"), [
    ([[0, 1, 2, 0, 1, 0]], None, None, 1, [(0, 3), (3, 2), (5, 1)]),
    ([[0, 1, 0], [0, 1, 2]], None, None, 2, [(0, 2), (2, 1), (3, 3)]),
    ([[0, 1, 2, 3]], [[1, 1, 0, 1]], None, 1, [(0, 2), (3, 1)]),
    (None, [[1, 1, 0], [0, 1, 1]], None, 2, [(0, 2), (4, 2)]),
    ([[0, 1, 2, 3, 4]], None, [0, 2, 5], 1, [(0, 2), (2, 3)]),
    (None, None, None, 2, [(0, 3), (3, 3)]),
])
def test_segment_spans(pos, mask, cu, batch, want):
    tokens = 6 // batch if pos is None and mask is None else len((pos or mask)[0])
    spans = segment_spans(None if pos is None else torch.tensor(pos),
                          None if mask is None else torch.tensor(mask), tokens,
                          cu_seqlens=None if cu is None else torch.tensor(cu), batch=batch)
    assert [(s.start, s.length) for s in spans] == want
