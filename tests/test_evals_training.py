"""The training-step benchmark: the --quick run writes its files, every method has a row per
dataset, and each method's per-example losses equal the losses of the examples alone."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evals import training

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def examples():
    rng = np.random.default_rng(3)
    out = []
    for n in (5, 40, 12, 63, 9, 30, 21, 2, 50, 17):
        out.append((rng.integers(3, 1024, n).tolist(), [0] * (n // 3) + [1] * (n - n // 3)))
    return out


@pytest.fixture(scope="module")
def model():
    return training.make_model(training.QUICK_MODEL, 128, "sdpa", torch.float64, "cpu")


@pytest.fixture(scope="module")
def segment_model():
    from ctxkit.training.segment_attention import register_segment_attention

    return training.make_model(training.QUICK_MODEL, 128, register_segment_attention(),
                               torch.float64, "cpu")


def _reference(model, examples):
    alone = [training._padded_step(examples, [i], torch) for i in range(len(examples))]
    return training.example_losses(model, alone, len(examples), "cpu")


def test_quick_run_writes_every_method(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXKIT_DATA", str(tmp_path / "absent"))  # generated lengths
    threads = torch.get_num_threads()
    res = training.main(["--quick", "--out", str(tmp_path), "--threads", str(threads + 1)])
    assert torch.get_num_threads() == threads  # the caller's setting comes back
    for name in ("training.json", "training.md", "training.png"):
        assert (tmp_path / name).stat().st_size > 0
    saved = json.loads((tmp_path / "training.json").read_text())
    assert {(r["dataset"], r["method"]) for r in saved["rows"]} == {
        ("synthetic", m) for m in training.METHODS}
    assert saved["losses_equal"] is True and saved["threads"] == threads + 1
    for r in res["rows"]:
        assert r["max_loss_diff"] <= training.TOLERANCE
        assert r["real_tokens"] == res["rows"][0]["real_tokens"]  # the same examples
        assert r["tokens_per_second"] > 0 and r["peak_mib"] >= 0
    assert "| synthetic | ctxkit.pack |" in (tmp_path / "training.md").read_text()


@pytest.mark.parametrize("method", training.METHODS)
def test_steps_have_the_sft_shape_and_keep_every_token(examples, method):
    steps = training.build_steps(method, examples, 64, 2)
    rows = training.padded_rows([len(e[0]) for e in examples], 128)
    if method == "ctxkit.pack":  # two windows of 64 a step
        assert all(s.owner.size <= 128 for s in steps)
        assert all(s.owner.size > 64 for s in steps[:-1])  # more than one window
    else:  # a fixed number of examples a step, the last one may be short
        per_step = [len(set(s.owner[s.owner >= 0].tolist())) for s in steps]
        assert per_step[:-1] == [rows] * (len(steps) - 1) and 0 < per_step[-1] <= rows
    owners = np.concatenate([s.owner.reshape(-1) for s in steps])
    counts = np.bincount(owners[owners >= 0], minlength=len(examples))
    assert counts.tolist() == [len(e[0]) for e in examples]


@pytest.mark.parametrize("method", training.METHODS)
def test_per_example_losses_equal_alone(model, examples, method):
    ref = _reference(model, examples)
    got = training.example_losses(model, training.build_steps(method, examples, 64, 2),
                                  len(examples), "cpu")
    assert np.abs(got - ref).max() <= training.TOLERANCE


@pytest.mark.parametrize("method", ["flattening", "ctxkit.pack"])
def test_per_segment_attention_losses_equal_alone(model, segment_model, examples, method):
    """The attention the benchmark gives the padding-free methods on CPU keeps examples apart."""
    got = training.example_losses(segment_model, training.build_steps(method, examples, 64, 2),
                                  len(examples), "cpu")
    assert np.abs(got - _reference(model, examples)).max() <= training.TOLERANCE


def test_loss_check_catches_contamination(model, examples):
    """Control: packed windows without restarting positions attend across examples."""
    steps = training.build_steps("ctxkit.pack", examples, 64, 2)
    for s in steps:
        s.inputs.pop("position_ids")
    got = training.example_losses(model, steps, len(examples), "cpu")
    assert np.abs(got - _reference(model, examples)).max() > 1e-3
