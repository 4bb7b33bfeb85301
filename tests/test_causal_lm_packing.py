"""No cross-contamination: a tiny causal LM gives the same logits and loss packed and unpacked.

The model is a randomly initialised Llama built from a config (no download). Each sequence run
alone is the reference; the packed batch (padded rows with the 4-D block mask, and the flat
padding-free layout with restarting position_ids) must reproduce every real token's logits and
the loss over the same target tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from ctxkit.packing.collate import IGNORE_INDEX, PackedCollator, pack

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 97
ATOL = 1e-4


def _tiny_llama(attn: str):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        attn_implementation=attn,
    )
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    return _tiny_llama(request.param)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    seqs = [rng.integers(3, VOCAB, size=int(n)).tolist() for n in (7, 12, 3, 20, 9, 1, 15, 5)]
    masks = [[0] * (len(s) // 3) + [1] * (len(s) - len(s) // 3) for s in seqs]
    return seqs, masks


def _reference(model, seqs, masks, sep=None):
    """Per sequence (with its separator): logits alone, and the summed loss on its targets."""
    logits, loss_sum, count = [], 0.0, 0
    for s, m in zip(seqs, masks):
        ids = s + ([sep] if sep is not None else [])
        keep = m + ([0] if sep is not None else [])
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids])).logits[0]
        logits.append(out)
        target = torch.tensor(ids[1:], dtype=torch.long)
        ce = torch.nn.functional.cross_entropy(out[:-1], target, reduction="none")
        sel = torch.tensor(keep[1:], dtype=torch.bool)
        loss_sum += float(ce[sel].sum())
        count += int(sel.sum())
    return logits, loss_sum / count


def _compare(batch, logits_rows, ref_logits, ref_loss, loss):
    for r, row in enumerate(batch.pieces):
        off = 0 if batch.layout == "padded" else sum(
            e - s for prev in batch.pieces[:r] for _, s, e in prev)
        row_idx = r if batch.layout == "padded" else 0
        for i, s, e in row:
            got = logits_rows[row_idx, off:off + e - s]
            torch.testing.assert_close(got, ref_logits[i][s:e], atol=ATOL, rtol=1e-4)
            off += e - s
    assert abs(float(loss) - ref_loss) < 1e-4


def test_padded_layout_with_block_mask(model, data):
    seqs, masks = data
    ref_logits, ref_loss = _reference(model, seqs, masks, sep=1)
    batch = pack(seqs, capacity=32, completion_mask=masks, separator_id=1, pad_id=0, seed=3)
    assert batch.n_windows < len(seqs)  # really packed: several sequences share a window
    inputs = batch.to_torch(attention_mask=True, causal=True)
    inputs.pop("segment_ids")
    if model.config._attn_implementation == "eager":  # eager adds the mask: make it additive
        mask = inputs["attention_mask"]
        inputs["attention_mask"] = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    with torch.no_grad():
        out = model(**inputs)
    _compare(batch, out.logits, ref_logits, ref_loss, out.loss)


def test_flat_layout_with_position_ids(model, data):
    seqs, masks = data
    ref_logits, ref_loss = _reference(model, seqs, masks)
    batch = pack(seqs, capacity=32, completion_mask=masks, layout="flat", strategy="ffd")
    inputs = batch.to_torch()  # exactly DataCollatorWithFlattening's keys, passed as they are
    assert "attention_mask" not in inputs
    with torch.no_grad():
        # transformers reads packed position_ids only without a KV cache (as in training)
        out = model(**inputs, use_cache=False)
    _compare(batch, out.logits, ref_logits, ref_loss, out.loss)


def test_packed_collator_in_a_training_step(data):
    """The collator's output feeds the model directly; loss and gradients equal unpacked ones."""
    seqs, masks = data
    model = _tiny_llama("sdpa")
    examples = [{"input_ids": s, "completion_mask": m} for s, m in zip(seqs, masks)]
    batch = PackedCollator(capacity=40, layout="padded")(examples)
    model.zero_grad()
    model(**batch).loss.backward()
    packed_grad = model.model.embed_tokens.weight.grad.clone()

    model.zero_grad()
    total, count = 0.0, 0
    for s, m in zip(seqs, masks):
        labels = torch.tensor([t if k else IGNORE_INDEX for t, k in zip(s, m)])
        labels[0] = IGNORE_INDEX
        n = int((labels[1:] != IGNORE_INDEX).sum())
        if n == 0:
            continue
        out = model(input_ids=torch.tensor([s]), labels=labels[None])
        total = total + out.loss * n
        count += n
    (total / count).backward()
    torch.testing.assert_close(packed_grad, model.model.embed_tokens.weight.grad,
                               atol=1e-5, rtol=1e-4)
    model.zero_grad()


def test_contamination_is_detected(model, data):
    """Control: the same rows without the block mask do differ, so the checks above can fail."""
    seqs, masks = data
    ref_logits, _ = _reference(model, seqs, masks, sep=1)
    batch = pack(seqs, capacity=32, completion_mask=masks, separator_id=1)
    inputs = batch.to_torch()
    with torch.no_grad():  # plain causal attention over the whole row
        logits = model(input_ids=inputs["input_ids"]).logits
    with pytest.raises(AssertionError):
        _compare(batch, logits, ref_logits, 0.0, 0.0)
