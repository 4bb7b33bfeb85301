"""PackedClassifier: logits equal to the unpacked model's, for every supported head and for
cross-encoder pairs with token types; built from tiny random models, nothing downloaded."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from ctxkit.embedding.classifier import PackedClassifier, scores_from_logits
from ctxkit.errors import InputError

torch.set_num_threads(min(2, torch.get_num_threads()))

MAX_LEN = 40  # the saved tokenizer's model_max_length: long texts below are cut to it
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
WORDS = ("packed rows keep every text apart with its own positions and a block mask; "
         "reviews say great, awful, fine, 12345, ünïcödé 日本語 🙂 def f(x): return x").split()


def texts_of(n: int, seed: int = 0) -> list[str]:
    """Mixed lengths like user data: empty, one word, sentences, and over the max length."""
    rng = np.random.default_rng(seed)
    lengths = rng.choice([1, 3, 8, 15, 30, 80], size=n, p=[.2, .2, .2, .2, .1, .1])
    return ["", "   ", "x " * 100] + [" ".join(rng.choice(WORDS, size=k)) for k in lengths]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from ctxkit.io.tokenizers import minilm_path

    tok = AutoTokenizer.from_pretrained(str(minilm_path()), local_files_only=True)
    tok.model_max_length = MAX_LEN
    return tok


def _config(arch: str, vocab: int, num_labels: int = 3):
    from transformers import BertConfig, DistilBertConfig, ElectraConfig, RobertaConfig

    common = {"vocab_size": vocab, "num_labels": num_labels, "initializer_range": 0.2,
              "id2label": LABELS if num_labels == 3 else None}
    common = {k: v for k, v in common.items() if v is not None}
    if arch == "distilbert":
        return DistilBertConfig(dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                max_position_embeddings=64, **common)
    layers = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 64}
    if arch == "roberta":  # positions count from pad_token_id + 1, one token type
        return RobertaConfig(max_position_embeddings=64 + 2, pad_token_id=0, type_vocab_size=1,
                             **layers, **common)
    if arch == "electra":
        return ElectraConfig(embedding_size=16, max_position_embeddings=64, **layers, **common)
    return BertConfig(max_position_embeddings=64, **layers, **common)


def build(arch: str, tokenizer, path, num_labels: int = 3):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed({"bert": 0, "roberta": 1, "electra": 2, "distilbert": 3}[arch])
    model = AutoModelForSequenceClassification.from_config(
        _config(arch, tokenizer.vocab_size, num_labels)).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


def reference(model, tokenizer, first, second=None, batch_size=4) -> np.ndarray:
    """The unpacked call a user makes: padded batches, truncation to model_max_length."""
    out = []
    for s in range(0, len(first), batch_size):
        args = [first[s:s + batch_size]] + ([second[s:s + batch_size]] if second else [])
        enc = tokenizer(*args, padding=True, truncation=True, return_tensors="pt")
        if model.config.model_type == "distilbert":
            enc.pop("token_type_ids")
        with torch.no_grad():
            out.append(model(**enc).logits.numpy())
    return np.concatenate(out)


@pytest.mark.parametrize("arch", ["bert", "roberta", "electra", "distilbert"])
def test_logits_equal_unpacked_model(arch, tokenizer, tmp_path):
    model = build(arch, tokenizer, tmp_path)
    texts = texts_of(40, seed=1)
    ref = reference(model, tokenizer, texts)
    assert np.ptp(ref, axis=0).min() > 1e-2  # the random head separates texts
    clf = PackedClassifier(tmp_path, device="cpu")
    got = clf.predict(texts)
    assert got.shape == (len(texts), 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
    assert clf.labels == ["negative", "neutral", "positive"]
    st = clf.last_stats
    assert st.texts == len(texts) and st.empty == 2
    assert st.truncated == sum(len(tokenizer(t)["input_ids"]) > MAX_LEN for t in texts) > 0
    assert st.rows < len(texts)  # texts really shared rows
    assert clf.packed.kind == ("fused" if arch == "bert" else "hf")


def test_loaded_model_and_generic_forward(tokenizer, tmp_path):
    """A loaded model (tokenizer given) and BERT through transformers' own forward."""
    model = build("bert", tokenizer, tmp_path)
    texts = texts_of(20, seed=2)
    ref = reference(model, tokenizer, texts)
    clf = PackedClassifier(model, device="cpu", tokenizer=tokenizer)
    clf.classifier.kind = "hf"
    np.testing.assert_allclose(clf.predict(texts), ref, atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def cross_encoder(tokenizer, tmp_path_factory):
    """A CrossEncoder saved the sentence-transformers way, from a tiny random BERT."""
    from sentence_transformers import CrossEncoder

    raw = tmp_path_factory.mktemp("ce_raw")
    build("bert", tokenizer, raw, num_labels=1)
    ce = CrossEncoder(str(raw), device="cpu", local_files_only=True, max_length=MAX_LEN)
    saved = tmp_path_factory.mktemp("ce")
    ce.save(str(saved))
    return CrossEncoder(str(saved), device="cpu", local_files_only=True), saved


def pairs_of(n: int, seed: int = 0) -> list[tuple[str, str]]:
    docs = texts_of(n, seed)
    queries = texts_of(n, seed + 100)[::-1]
    return [(q[:60], d) for q, d in zip(queries, docs)] + [("", ""), ("q " * 50, "short")]


@pytest.mark.parametrize("attention", ["block", "varlen"])
def test_cross_encoder_pairs_equal_predict(cross_encoder, attention):
    ce, path = cross_encoder
    pairs = pairs_of(30, seed=3)
    ref_logits = ce.predict(pairs, batch_size=8, activation_fn=torch.nn.Identity())
    clf = PackedClassifier(path, device="cpu", attention=attention)
    assert clf.classifier.cross_encoder and clf.max_seq_length == MAX_LEN
    logits = clf.predict(pairs)
    assert logits.shape == (len(pairs), 1)
    np.testing.assert_allclose(logits[:, 0], ref_logits, atol=1e-5, rtol=0)
    np.testing.assert_allclose(clf.predict(pairs, activation=True)[:, 0],
                               ce.predict(pairs, batch_size=8), atol=1e-6, rtol=0)
    assert clf.last_stats.truncated > 0 and clf.last_stats.empty == 1


def test_token_types_reach_the_encoder(cross_encoder):
    """Pairs and the same tokens without the second segment's type give different logits."""
    ce, path = cross_encoder
    clf = PackedClassifier(ce, device="cpu")
    pairs = pairs_of(6, seed=4)
    tk = clf.tokenize(pairs)
    assert tk.types is not None and tk.types.max() == 1
    with_types = clf.predict(pairs)
    tk.types = None
    from ctxkit.embedding.encoder import EncodeStats

    without = clf._compute(tk, clf.batch_tokens, clf._logits, 1, EncodeStats())
    assert np.abs(with_types - without).max() > 1e-4


def test_scores_follow_the_pipeline_rule():
    from types import SimpleNamespace

    logits = np.array([[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]], dtype=np.float32)
    soft = scores_from_logits(logits, SimpleNamespace(problem_type=None))
    np.testing.assert_allclose(soft.sum(1), 1.0, atol=1e-6)
    assert soft[0].argmax() == 1
    sig = scores_from_logits(logits[:, :1], SimpleNamespace(problem_type=None))
    np.testing.assert_allclose(sig[:, 0], 1 / (1 + np.exp(-logits[:, 0])), atol=1e-6)
    reg = scores_from_logits(logits, SimpleNamespace(problem_type="regression"))
    assert np.array_equal(reg, logits)


def test_bad_inputs_and_models(tokenizer, tmp_path, cross_encoder):
    _, path = cross_encoder
    clf = PackedClassifier(path, device="cpu")
    with pytest.raises(InputError, match="not one str"):
        clf.predict("one text")
    with pytest.raises(InputError, match="input 1 is a pair but input 0 is a text"):
        clf.predict(["a", ("q", "d")])
    with pytest.raises(InputError, match="input 1 is a tuple of 3"):
        clf.predict([("q", "d"), ("q", "d", "e")])
    with pytest.raises(InputError, match="input 0 is NoneType"):
        clf.predict([None])
    with pytest.raises(InputError, match="inputs must be a list"):
        clf.predict(None)
    assert clf.predict([]).shape == (0, 1)
    with pytest.raises(ValueError, match="model directory not found"):
        PackedClassifier(tmp_path / "missing", device="cpu")
    with pytest.raises(ValueError, match="needs a model"):
        PackedClassifier(None, device="cpu")
    with pytest.raises(ValueError, match="cannot load a sequence classifier"):
        PackedClassifier(tmp_path, device="cpu")  # an empty directory
    with pytest.raises(ValueError, match="max_length must be"):
        PackedClassifier(path, device="cpu", max_length=10_000)


# ----- ctxkit classify ----------------------------------------------------------------------


def test_cli_classify_texts_and_pairs(tokenizer, tmp_path, cross_encoder, capsys):
    import json

    from ctxkit.cli import main
    from ctxkit.io.records import read_records

    model_dir = tmp_path / "clf"
    model = build("bert", tokenizer, model_dir)
    texts = texts_of(12, seed=5)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"key": f"r{i}", "body": t, "q": f"query {i}"}) + "\n"
                           for i, t in enumerate(texts)))
    out, rep = tmp_path / "labels.jsonl", tmp_path / "rep.json"
    code = main(["classify", str(src), "--model", str(model_dir), "-o", str(out), "--field",
                 "body", "--id-field", "key", "--device", "cpu", "--no-progress",
                 "--report", str(rep), "--chunk-size", "5"])
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(len(texts))]
    logits = np.array([r["logits"] for r in rows])
    np.testing.assert_allclose(logits, reference(model, tokenizer, texts), atol=1e-5, rtol=0)
    probs = scores_from_logits(logits, model.config)
    assert [r["label"] for r in rows] == [LABELS[k] for k in probs.argmax(1)]
    np.testing.assert_allclose([r["score"] for r in rows], probs.max(1), atol=1e-6)
    report = json.loads(rep.read_text())
    assert report["texts"] == len(texts) and sum(report["label_counts"].values()) == len(texts)
    assert report["truncated"] >= 1 and report["empty"] == 2

    ce, ce_dir = cross_encoder
    pq_out = tmp_path / "scores.parquet"
    code = main(["classify", str(src), "--model", str(ce_dir), "-o", str(pq_out), "--field",
                 "body", "--query-field", "q", "--device", "cpu", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    got = [r.raw["score"] for r in read_records(pq_out, field="label")]
    want = ce.predict([(f"query {i}", t) for i, t in enumerate(texts)])
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_cli_classify_query_errors(tmp_path, cross_encoder, capsys):
    import json

    from ctxkit.cli import main

    _, ce_dir = cross_encoder
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "a", "q": "x"}) + "\n" + json.dumps({"text": "b"}) + "\n")
    out = tmp_path / "o.jsonl"
    code = main(["classify", str(src), "--model", str(ce_dir), "-o", str(out),
                 "--query-field", "q", "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "in.jsonl:2" in err and "query field 'q' is missing" in err
    assert not out.exists()


# ----- the cross-encoder:<dir> compression scorer -------------------------------------------


def test_cross_encoder_scorer_ranks_like_the_reranker(cross_encoder, monkeypatch):
    from ctxkit.compression.scoring.cross_encoder import CrossEncoderScorer
    from ctxkit.compression.scoring.registry import available_scorers, get_scorer

    ce, path = cross_encoder
    scorer = get_scorer(f"cross-encoder:{path}", device="cpu")
    assert isinstance(scorer, CrossEncoderScorer) and scorer.name == "cross-encoder"
    assert "cross-encoder:<dir>" in available_scorers()
    units = texts_of(12, seed=6)[3:]
    query = "which reviews say the rows are packed?"
    logits = ce.predict([(query, u) for u in units], activation_fn=torch.nn.Identity())
    want = (logits - logits.min()) / (logits.max() - logits.min())
    np.testing.assert_allclose(scorer.relevance(units, query), want, atol=1e-5)
    calls = []
    monkeypatch.setattr(scorer.classifier, "predict",
                        lambda items: calls.append(items) or np.zeros((len(items), 1)))
    scorer.relevance(units[:4] + ["a new unit"], query)  # cached pairs are not scored again
    assert calls == [[(query, "a new unit")]]


def test_cross_encoder_scorer_in_compress_and_cli(cross_encoder, tmp_path, capsys):
    import ctxkit
    from ctxkit.cli import main

    _, path = cross_encoder
    paras = [". ".join(t for t in texts_of(6, seed=s)[3:] if len(t) < 200) + "."
             for s in range(8)]
    text = "\n\n".join(paras)
    res = ctxkit.compress(text, budget=60, query="packed rows", scorer=f"cross-encoder:{path}")
    assert 0 < res.compressed_tokens <= 60
    src = tmp_path / "doc.txt"
    src.write_text(text)
    code = main(["compress", str(src), "-b", "60", "-q", "packed rows", "-o",
                 str(tmp_path / "out.txt"), "--scorer", f"cross-encoder:{path}"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "out.txt").read_text() == res.text
    code = main(["compress", str(src), "-b", "60", "-o", str(tmp_path / "o2.txt"),
                 "--scorer", f"cross-encoder:{tmp_path / 'none'}"])
    err = capsys.readouterr().err
    assert code == 2 and "error: " in err and "model directory not found" in err
    with pytest.raises(ValueError, match="needs a model directory"):
        ctxkit.get_scorer("cross-encoder:")


# ----- models without the head they are used for --------------------------------------------


def test_cli_classify_refuses_a_model_without_a_classification_head(tokenizer, tmp_path,
                                                                     capsys):
    """A bare encoder loaded as a classifier gets a random head: random labels, exit 0."""
    import json

    from transformers import BertModel

    from ctxkit.cli import main

    model_dir = tmp_path / "encoder"
    BertModel(_config("bert", tokenizer.vocab_size)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "great product"}) + "\n")
    out = tmp_path / "labels.jsonl"
    code = main(["classify", str(src), "--model", str(model_dir), "-o", str(out),
                 "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "BertModel, not a sequence classifier" in err, err
    assert not out.exists()


def test_a_checkpoint_lacking_the_head_weights_is_refused(tokenizer, tmp_path):
    """The config names a classifier, the weights have no classifier: refused by name."""
    import json

    from transformers import BertModel

    model_dir = tmp_path / "no-head"
    BertModel(_config("bert", tokenizer.vocab_size)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["architectures"] = ["BertForSequenceClassification"]
    (model_dir / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"not a trained sequence classifier: its checkpoint "
                                         r"lacks classifier\.bias, classifier\.weight"):
        PackedClassifier(str(model_dir), device="cpu")


def test_a_pickle_that_will_not_load_is_an_input_error(tokenizer, tmp_path, capsys):
    """A ``pytorch_model.bin`` holding arbitrary objects: torch refuses to unpickle it."""
    import collections
    import json

    from ctxkit.cli import main

    model_dir = tmp_path / "pickled"
    model_dir.mkdir()
    _config("bert", tokenizer.vocab_size).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    torch.save({"bert.embeddings.word_embeddings.weight": collections.Counter(a=1)},
               model_dir / "pytorch_model.bin")
    with pytest.raises(InputError, match="cannot load a sequence classifier"):
        PackedClassifier(str(model_dir), device="cpu")
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "great product"}) + "\n")
    code = main(["classify", str(src), "--model", str(model_dir), "-o",
                 str(tmp_path / "o.jsonl"), "--device", "cpu", "--no-progress"])
    assert code == 2, capsys.readouterr().err


def test_loading_prints_no_transformers_bars_or_reports(tokenizer, tmp_path, capfd):
    build("bert", tokenizer, tmp_path / "quiet")
    capfd.readouterr()
    PackedClassifier(str(tmp_path / "quiet"), device="cpu").predict(["a"])
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "LOAD REPORT" not in err, err
