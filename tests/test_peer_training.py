"""Training with ctxkit's packing in TRL's ``SFTTrainer`` and transformers' ``Trainer``.

A tiny randomly initialised Llama (built from a config here) and a word-level tokenizer built
in memory: nothing downloads. Each trainer runs a few optimizer steps on CPU in float32.
The README's "Train with TRL or transformers" section runs here as written, with these
stand-ins for the reader's ``model``, ``tokenizer`` and ``ds``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import ctxkit
from ctxkit import PackedCollator
from ctxkit.packing.hf import pack_dataset

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
trl = pytest.importorskip("trl")
tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[1]
README_SECTION = "Train with TRL or transformers"
VOCAB = 64
CAPACITY = 128
datasets.disable_progress_bars()


@pytest.fixture(autouse=True)
def _offline_in_tmp(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.chdir(tmp_path)  # trainers write their output_dir here


def tiny_tokenizer():
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    model = tokenizers.models.WordLevel(vocab, unk_token="<unk>")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(model), pad_token="<pad>", eos_token="<eos>",
        unk_token="<unk>")


def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return transformers.LlamaForCausalLM(config)


def sft_data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(3, VOCAB, int(k)).tolist() for k in rng.integers(4, 40, n)]
    masks = [[0] * (len(s) // 3) + [1] * (len(s) - len(s) // 3) for s in seqs]
    return datasets.Dataset.from_dict({"input_ids": seqs, "completion_mask": masks})


STEPS = {"max_steps": 2, "logging_steps": 1, "report_to": "none", "save_strategy": "no",
         "bf16": False, "seed": 0, "disable_tqdm": True}


def losses(trainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_padding_free_needs_max_length_none_on_trl():
    """Why the recipe sets ``max_length=None``: TRL refuses padding-free training without
    packing while ``max_length`` is set, since it would not enforce it."""
    packed = pack_dataset(sft_data(8), capacity=CAPACITY)
    with pytest.raises(ValueError, match="max_length` is not enforced"):
        trl.SFTTrainer(model=tiny_llama(), processing_class=tiny_tokenizer(),
                       train_dataset=packed,
                       args=trl.SFTConfig(output_dir="out", padding_free=True, **STEPS))


def test_sft_on_pack_dataset_equals_trl_packing():
    """ctxkit's rows through TRL's padding-free path train exactly as TRL's own
    ``packing=True, packing_strategy="bfd"`` (prompts masked by ``completion_mask``)."""
    ds = sft_data()
    tok = tiny_tokenizer()
    ours = trl.SFTTrainer(
        model=tiny_llama(), processing_class=tok,
        train_dataset=pack_dataset(ds, capacity=CAPACITY),
        args=trl.SFTConfig(output_dir="ours", padding_free=True, max_length=None,
                           per_device_train_batch_size=2, **STEPS))
    theirs = trl.SFTTrainer(
        model=tiny_llama(), processing_class=tok, train_dataset=ds,
        args=trl.SFTConfig(output_dir="theirs", packing=True, packing_strategy="bfd",
                           max_length=CAPACITY, completion_only_loss=True,
                           per_device_train_batch_size=2, **STEPS))
    a, b = ours.train_dataset, theirs.train_dataset
    assert a.num_rows == b.num_rows
    for key in ("input_ids", "seq_lengths"):
        assert a[key] == b[key], key
    collate = ours.data_collator
    for r in range(0, a.num_rows, 2):
        x = collate([a[i] for i in range(r, min(r + 2, a.num_rows))])
        y = collate([b[i] for i in range(r, min(r + 2, b.num_rows))])
        for key in x:
            assert (torch.equal(x[key], y[key]) if isinstance(x[key], torch.Tensor)
                    else x[key] == y[key]), key
    ours.train()
    theirs.train()
    assert len(losses(ours)) == 2
    np.testing.assert_allclose(losses(ours), losses(theirs), rtol=1e-6)


def _reference_loss(examples) -> float:
    """The token-mean loss of a fresh tiny Llama on each example alone (targets: the
    completion tokens after the first)."""
    model = tiny_llama().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]])
            logits = model(input_ids=ids).logits[0, :-1]
            target = ids[0, 1:]
            keep = torch.tensor(ex["completion_mask"][1:], dtype=torch.bool)
            ce = torch.nn.functional.cross_entropy(logits, target, reduction="none")
            total += float(ce[keep].sum())
            count += int(keep.sum())
    return total / count


@pytest.mark.parametrize("layout", ["flat", "padded"])
def test_trainer_with_packed_collator(layout):
    """transformers' Trainer with PackedCollator: the first step's loss (one batch of every
    example) equals the unpacked loss, and training runs."""
    ds = sft_data(16)
    collate = PackedCollator(capacity=CAPACITY, layout=layout)
    trainer = transformers.Trainer(
        model=tiny_llama(), train_dataset=ds, data_collator=collate,
        args=transformers.TrainingArguments(
            output_dir="run", remove_unused_columns=False, per_device_train_batch_size=16,
            use_cpu=True, **STEPS))
    trainer.train()
    got = losses(trainer)
    assert len(got) == 2 and all(np.isfinite(got))
    np.testing.assert_allclose(got[0], _reference_loss(list(ds)), rtol=1e-4)


def test_sft_trainer_with_packed_collator():
    """SFTTrainer with PackedCollator as its data_collator (padding_free stays off: TRL refuses
    a custom collator there); the first step's loss equals the unpacked loss."""
    ds = sft_data(16)
    trainer = trl.SFTTrainer(
        model=tiny_llama(), processing_class=tiny_tokenizer(), train_dataset=ds,
        data_collator=PackedCollator(capacity=CAPACITY, layout="flat"),
        args=trl.SFTConfig(output_dir="sft", max_length=CAPACITY, completion_only_loss=True,
                           per_device_train_batch_size=16, **STEPS))
    trainer.train()
    got = losses(trainer)
    assert len(got) == 2 and all(np.isfinite(got))
    np.testing.assert_allclose(got[0], _reference_loss(list(ds)), rtol=1e-4)


def readme_section(heading: str) -> str:
    """The python blocks of one ``## heading`` section of the README, joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.split(r"^## ", text, flags=re.M)
    body = next(s for s in section if s.startswith(heading + "\n"))
    return "\n".join(re.findall(r"^```python\n(.*?)^```$", body, flags=re.M | re.S))


def test_readme_training_recipe_runs_as_written():
    code = readme_section(README_SECTION)
    assert "pack_dataset" in code and "SFTTrainer" in code and "PackedCollator" in code
    namespace = {"ctxkit": ctxkit, "model": tiny_llama(), "tokenizer": tiny_tokenizer(),
                 "ds": sft_data(16)}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
