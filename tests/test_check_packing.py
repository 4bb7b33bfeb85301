"""check_packing: correct packed batches pass, and each broken one is flagged with its cause.

Tiny random causal LMs of each family (Llama, Qwen2, Qwen3, Mistral, and a Gemma with
head_dim 256), built from configs (no download), with eager and sdpa attention on the CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import ctxkit
from ctxkit.errors import InputError, OptionError
from ctxkit.packing.collate import IGNORE_INDEX, pack
from ctxkit.training.check import CheckPackingOptions, check_packing
from ctxkit.training.command import check_packing_command
from ctxkit.training.varlen import cu_seqlens_from_positions, register_varlen_attention

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VOCAB = 61
SEP = 1
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              max_position_embeddings=128)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_attention_heads=4,
                                                       num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_attention_heads=4,
                                                       num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_attention_heads=4,
                                                       num_key_value_heads=2, head_dim=8)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_attention_heads=4,
                                                             num_key_value_heads=2)),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(num_attention_heads=2,
                                                       num_key_value_heads=1, head_dim=256)),
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one intra-op thread; more only contend for the cores."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def tiny_model(family: str, attn: str, use_cache: bool = False):
    """A tiny random model; ``use_cache=False`` as transformers' Trainer configures it."""
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**COMMON, **extra, attn_implementation=attn,
                                               use_cache=use_cache)
    return getattr(transformers, model_cls)(config).eval()


@pytest.fixture(scope="module", params=[(f, a) for f in FAMILIES for a in ("eager", "sdpa")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def model(request):
    return tiny_model(*request.param)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2)
    seqs = [rng.integers(3, VOCAB, size=int(n)).tolist() for n in (7, 12, 3, 9, 5, 6)]
    masks = [[0] * (len(s) // 3) + [1] * (len(s) - len(s) // 3) for s in seqs]
    return seqs, masks


def _prompts(batch, seqs):
    """Per segment of ``batch`` (row order), its input's prompt length."""
    return [len(seqs[i]) // 3 for i in batch.segment_input.tolist()]


def _flat(seqs, **kw):
    return pack(seqs, capacity=24, layout="flat", strategy="ffd", **kw)


def _assert_leak(res, cause):
    assert res.verdict == "leak", res.reason
    assert cause in res.causes, res.causes
    assert res.leaking or cause == "separator"
    word = {"positions": "position_ids", "mask_2d": "all-ones 2-D attention_mask",
            "labels_cross": "labels are not -100", "prompt_loss": "prompt token",
            "separator": "separator", "use_cache": "called with use_cache=True"}[cause]
    assert word in res.reason
    for seg in res.leaking:
        assert word in seg.reason


# --- correct batches pass ---------------------------------------------------------------

def test_ctxkit_padded_batch_passes(model, data):
    seqs, masks = data
    batch = pack(seqs, capacity=24, completion_mask=masks, separator_id=SEP, seed=1)
    assert batch.n_windows < len(seqs)  # several segments share a row
    res = check_packing(model, batch, separator_id=SEP, prompt_lengths=_prompts(batch, seqs))
    assert res.verdict == "ok", res.reason
    assert len(res.segments) == len(seqs) and res.findings == []
    assert res.max_logit_diff < 1e-4 and res.max_loss_diff < 1e-4
    assert res.reference_loss == pytest.approx(res.batch_loss, abs=1e-4)


def test_ctxkit_flat_batch_passes(model, data):
    seqs, masks = data
    batch = _flat(seqs, completion_mask=masks)
    res = check_packing(model, batch, prompt_lengths=_prompts(batch, seqs))
    assert res.verdict == "ok", res.reason
    assert res.reason.startswith("ok: all 6 segments")


def test_flattening_collator_batch_passes(model, data):
    seqs, _ = data
    collate = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True,
                                                      return_seq_idx=True)
    batch = collate([{"input_ids": s} for s in seqs])
    res = check_packing(model, batch)
    assert res.verdict == "ok", res.reason
    assert [s.length for s in res.segments] == [len(s) for s in seqs]
    assert res.batch_loss == pytest.approx(res.reference_loss, abs=1e-4)


# --- broken batches are flagged with their cause --------------------------------------------

def test_positions_that_do_not_restart(model, data):
    seqs, _ = data
    batch = _flat(seqs).to_torch()
    batch["position_ids"] = torch.arange(batch["input_ids"].shape[1])[None]
    _assert_leak(check_packing(model, batch), "positions")


def test_all_ones_mask_on_a_flattened_batch(model, data):
    seqs, _ = data
    collate = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    batch = collate([{"input_ids": s} for s in seqs])
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    res = check_packing(model, batch)
    _assert_leak(res, "mask_2d")
    assert res.segments[0].verdict == "ok"  # the first segment has nothing before it to see


def test_labels_that_cross_a_boundary(model, data):
    seqs, _ = data
    batch = _flat(seqs).to_torch()
    batch["labels"] = batch["input_ids"].clone()  # the label at each segment start is kept
    res = check_packing(model, batch)
    _assert_leak(res, "labels_cross")
    assert res.max_logit_diff < 1e-4  # attention is right: only the loss crosses
    assert res.segments[0].verdict == "ok"


def test_loss_on_prompt_tokens(model, data):
    seqs, _ = data
    batch = _flat(seqs)  # no completion mask: prompts are trained on
    _assert_leak(check_packing(model, batch, prompt_lengths=_prompts(batch, seqs)),
                 "prompt_loss")


def test_missing_separators(model, data):
    seqs, _ = data
    res = check_packing(model, _flat(seqs), separator_id=SEP)
    _assert_leak(res, "separator")
    assert res.max_logit_diff < 1e-4  # no number shows it: inspection decides


# --- the rest of the API ------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", "sdpa")


def test_completion_mask_in_a_collated_batch(llama, data):
    seqs, masks = data
    collate = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    batch = collate([{"input_ids": s} for s in seqs])
    batch["completion_mask"] = torch.tensor([sum(masks, [])])
    _assert_leak(check_packing(llama, batch), "prompt_loss")
    good = collate([{"input_ids": s, "labels": [t if k else IGNORE_INDEX for t, k in zip(s, m)]}
                    for s, m in zip(seqs, masks)])
    good["completion_mask"] = batch["completion_mask"]
    assert check_packing(llama, good).verdict == "ok"


def test_a_list_of_batches_and_explicit_segments(llama, data):
    seqs, _ = data
    flat = _flat(seqs)
    plain = {"input_ids": flat.input_ids, "labels": flat.labels}  # no boundaries at all
    lengths = [[len(seqs[i]) for i in flat.segment_input.tolist()]]
    res = check_packing(llama, [flat, plain], segments=[None, lengths])
    assert [s.batch for s in res.segments] == [0] * 6 + [1] * 6
    assert [s.index for s in res.segments] == list(range(12))
    assert res.verdict == "leak" and "positions" in res.causes
    assert all(s.verdict == "ok" for s in res.segments[:6])
    assert set(res.finding_batches) == {1}
    assert res.to_dict()["findings"][0]["batch"] == 1


def test_a_boolean_mask_with_eager_attention_is_named():
    model = tiny_model("llama", "eager")
    batch = pack([[5, 6, 7], [8, 9, 10, 11]], capacity=8).to_torch(attention_mask=True)
    res = check_packing(model, batch)  # segments from segment_ids; the bool mask goes as it is
    _assert_any(res, "mask_bool_eager")


def test_a_4d_mask_that_lets_segments_see_each_other(llama):
    batch = pack([[5, 6, 7], [8, 9, 10, 11]], capacity=8).to_torch(attention_mask=True)
    batch["attention_mask"] = torch.tril(torch.ones(1, 1, 8, 8, dtype=torch.bool))
    _assert_any(check_packing(llama, batch), "mask_4d")


def _assert_any(res, cause):
    assert res.verdict == "leak" and cause in res.causes, (res.causes, res.reason)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_a_model_configured_with_the_kv_cache(data, attn):
    """config.use_cache on (transformers' default) builds a cache in a training loop's
    model(**batch), which turns off packed-sequence detection: a correct batch leaks."""
    seqs, _ = data
    model = tiny_model("llama", attn, use_cache=True)
    res = check_packing(model, _flat(seqs))
    _assert_leak(res, "use_cache")
    assert res.causes == ["use_cache"] and len(res.leaking) == len(seqs) - 1  # all but first
    # a 4-D block mask needs no detection: the cache changes nothing there
    assert check_packing(model, pack(seqs, capacity=24, seed=1)).verdict == "ok"
    model.config.use_cache = False  # what the reason says to do
    assert check_packing(model, _flat(seqs)).verdict == "ok"


def test_training_mode_is_restored(llama):
    llama.train()
    check_packing(llama, pack([[5, 6], [7, 8, 9]], capacity=8))
    assert llama.training
    llama.eval()


def test_options_and_bad_input(llama):
    with pytest.raises(OptionError, match="atol"):
        check_packing(llama, pack([[5, 6]], capacity=4), atol=-1)
    with pytest.raises(OptionError, match="separator_id"):
        CheckPackingOptions(separator_id="eos")
    assert CheckPackingOptions.resolve(CheckPackingOptions(atol=0.5), separator_id=2).atol == 0.5
    with pytest.raises(InputError, match="input_ids"):
        check_packing(llama, {"labels": [[1, 2]]})
    with pytest.raises(InputError, match="2-D"):
        check_packing(llama, {"input_ids": [1, 2, 3]})
    with pytest.raises(InputError, match="PackResult"):
        check_packing(llama, 42)
    with pytest.raises(InputError, match="prompt_lengths"):
        check_packing(llama, pack([[5, 6], [7]], capacity=4), prompt_lengths=[1])
    with pytest.raises(InputError, match="cu_seq_lens_q"):
        check_packing(llama, {"input_ids": [[5, 6, 7]], "cu_seq_lens_q": [0, 2]})
    with pytest.raises(InputError, match="segments row 0"):
        check_packing(llama, {"input_ids": [[5, 6, 7]]}, segments=[[2, 2]])
    with pytest.raises(InputError, match="model"):
        check_packing(object(), pack([[5, 6]], capacity=4))
    with pytest.raises(InputError, match="vocabulary"):
        check_packing(llama, pack([[5, VOCAB]], capacity=4))


def test_public_names():
    assert ctxkit.check_packing is check_packing
    assert ctxkit.CheckPackingResult.__name__ == "CheckPackingResult"
    assert {"CheckPackingOptions", "SegmentCheck", "PackingCause"} <= set(ctxkit.__all__)


# --- varlen attention (GPU) ---------------------------------------------------------------

def test_cu_seqlens_from_positions():
    pos = torch.tensor([[0, 1, 2, 0, 1], [0, 1, 0, 1, 2]])
    assert cu_seqlens_from_positions(pos).tolist() == [0, 3, 5, 7, 10]
    assert register_varlen_attention() == "ctxkit_varlen"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's varlen attention needs CUDA")
@pytest.mark.parametrize("layout", ["flat", "padded"])
def test_varlen_attention_on_gpu(data, layout):
    seqs, masks = data
    model = tiny_model("llama", "sdpa").to("cuda")
    model.set_attn_implementation(register_varlen_attention())
    batch = pack(seqs, capacity=24, completion_mask=masks, layout=layout)
    res = check_packing(model, batch, prompt_lengths=_prompts(batch, seqs), atol=1e-3)
    assert res.verdict == "ok", res.reason
    assert res.attn_implementation == "ctxkit_varlen"


# --- the check-packing command ----------------------------------------------------------

WORDS = ["<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(VOCAB - 3)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny Llama and a WordLevel tokenizer saved to a directory, as a user's model is."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    path = tmp_path_factory.mktemp("model")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>",
                                                pad_token="<pad>", unk_token="<unk>")
    fast.save_pretrained(path)
    tiny_model("llama", "sdpa").save_pretrained(path)
    return path


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps the table and verdict at the width


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _text(n, start):
    return " ".join(f"w{(start + 7 * i) % (VOCAB - 3)}" for i in range(n))


def test_command_passes_text_and_token_records(model_dir, tmp_path, capsys):
    texts = _write(tmp_path / "t.jsonl", [{"text": _text(n, n)} for n in (5, 9, 4, 7, 3)])
    assert check_packing_command(model_dir, texts, capacity=16) == 0
    out = capsys.readouterr().out
    assert "ok: all 5 segments" in out and "max |d logit|" in out
    alpaca = _write(tmp_path / "a.jsonl", [{"instruction": _text(3, n), "output": _text(n, 1)}
                                           for n in (4, 6, 2)])
    assert check_packing_command(model_dir, alpaca, capacity=128, template="alpaca",
                                 layout="padded") == 0
    tokens = _write(tmp_path / "k.jsonl", [{"input_ids": [5, 6, 7, 8], "completion_mask":
                                            [0, 0, 1, 1]}, {"input_ids": [9, 10, 11]}])
    assert check_packing_command(model_dir, tokens, capacity=8, separator="none") == 0


def test_command_runs_the_batch_as_a_trainer_does(model_dir, tmp_path, capsys):
    """A saved config says ``use_cache: true`` (how the model generates); the command trains
    without the cache unless ``--use-cache`` asks for it, which leaks and names the cause."""
    import shutil

    saved = tmp_path / "saved"
    shutil.copytree(model_dir, saved)
    config = json.loads((saved / "config.json").read_text())
    config["use_cache"] = True
    (saved / "config.json").write_text(json.dumps(config))
    texts = _write(tmp_path / "t.jsonl", [{"text": _text(n, n)} for n in (5, 9, 4)])
    assert check_packing_command(saved, texts, capacity=32) == 0
    capsys.readouterr()
    assert check_packing_command(saved, texts, capacity=32, use_cache=True) == 1
    assert "use_cache" in capsys.readouterr().out


def test_command_exits_1_on_a_leak(model_dir, tmp_path, capsys):
    """An attention kernel that ignores the segment boundaries: every later segment leaks."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    def one_sequence(module, q, k, v, attention_mask, **kw):
        return sdpa_attention_forward(module, q, k, v, None, **kw)

    AttentionInterface.register("one_sequence", one_sequence)
    ALL_MASK_ATTENTION_FUNCTIONS.register("one_sequence", sdpa_mask)
    texts = _write(tmp_path / "t.jsonl", [{"text": _text(n, n)} for n in (5, 9, 4)])
    code = check_packing_command(model_dir, texts, capacity=32,
                                 attn_implementation="one_sequence")
    assert code == 1
    out = capsys.readouterr().out
    assert "leak: 2 of 3 segments" in out and "no known cause" in out


def test_command_exits_2_on_bad_input(model_dir, tmp_path, capsys):
    good = _write(tmp_path / "t.jsonl", [{"text": "w1 w2"}])
    assert check_packing_command(tmp_path / "nope", good, capacity=8) == 2
    assert "model directory not found" in capsys.readouterr().err
    assert check_packing_command(model_dir, tmp_path / "none.jsonl", capacity=8) == 2
    assert "none.jsonl" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1"}\nnot json\n')
    assert check_packing_command(model_dir, bad, capacity=8) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    tok_bad = _write(tmp_path / "k.jsonl", [{"input_ids": [1, "x"]}])
    assert check_packing_command(model_dir, tok_bad, capacity=8) == 2
    assert "k.jsonl:1" in capsys.readouterr().err
    assert check_packing_command(tmp_path, good, capacity=8) == 2  # a directory, no model
    assert "cannot load" in capsys.readouterr().err
    assert check_packing_command(model_dir, good, capacity=0) == 2
    assert "capacity" in capsys.readouterr().err


def test_the_ctxkit_command_runs_the_check(model_dir, tmp_path, capsys):
    from ctxkit.cli import main

    texts = _write(tmp_path / "t.jsonl", [{"text": _text(n, n)} for n in (5, 9, 4)])
    assert main(["check-packing", str(texts), "--model", str(model_dir), "-c", "16"]) == 0
    assert "ok: all 3 segments" in capsys.readouterr().out
    assert main(["check-packing", str(texts), "--model", str(tmp_path / "nope")]) == 2
    assert "model directory not found" in capsys.readouterr().err


def _save_beside_tokenizer(model, model_dir, path):
    """``model`` saved with the tokenizer of ``model_dir``."""
    import shutil

    path.mkdir()
    for f in model_dir.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, path / f.name)
    model.save_pretrained(path)
    return path


def test_command_refuses_a_model_of_another_kind(model_dir, tmp_path, capsys):
    """A classifier or a bare decoder loaded as a causal LM gets a random LM head: the verdict
    would be about a model nobody trains, so the command refuses it."""
    config_cls, _, extra = FAMILIES["llama"]
    config = getattr(transformers, config_cls)(**COMMON, **extra, num_labels=2)
    texts = _write(tmp_path / "t.jsonl", [{"text": _text(n, n)} for n in (5, 9, 4)])
    for model_cls, says in (("LlamaForSequenceClassification", "not a causal LM"),
                            ("LlamaModel", "not a causal LM")):
        torch.manual_seed(0)
        path = _save_beside_tokenizer(getattr(transformers, model_cls)(config),
                                      model_dir, tmp_path / model_cls)
        assert check_packing_command(path, texts, capacity=16) == 2
        err = capsys.readouterr().err
        assert says in err and model_cls in err, err


def test_command_refuses_a_checkpoint_without_the_lm_head(model_dir, tmp_path, capsys):
    """No architecture in the config, and the weights lack lm_head: transformers would make
    one up."""
    config_cls, _, extra = FAMILIES["llama"]
    config = getattr(transformers, config_cls)(**COMMON, **extra, tie_word_embeddings=False)
    path = _save_beside_tokenizer(transformers.LlamaModel(config), model_dir, tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    del cfg["architectures"]
    (path / "config.json").write_text(json.dumps(cfg))
    texts = _write(tmp_path / "t.jsonl", [{"text": _text(5, 5)}])
    assert check_packing_command(path, texts, capacity=16) == 2
    err = capsys.readouterr().err
    assert "not a trained causal LM" in err and "lm_head.weight" in err, err
