import pytest

from ctxkit.errors import InputError
from ctxkit.io.tokenizers import available_tokenizers, get_tokenizer, resolve_tokenizer


def test_cl100k_offline_roundtrip():
    tok = get_tokenizer("cl100k_base")
    assert tok.name == "cl100k_base"
    ids = tok.encode("hello world")
    assert ids == [15339, 1917]
    assert tok.decode(ids) == "hello world"
    assert tok.count("one two three") == 3
    assert tok.eos_id == 100257


def test_special_token_text_is_plain_text():
    tok = get_tokenizer("cl100k_base")
    ids = tok.encode("a <|endoftext|> b")
    assert tok.eos_id not in ids
    assert tok.decode(ids) == "a <|endoftext|> b"


def test_encode_batch_matches_encode():
    tok = get_tokenizer("cl100k_base")
    texts = ["", "x", "a longer sentence, with punctuation!", "ünïcödé 日本語"]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_minilm_tokenizer():
    tok = get_tokenizer("minilm")
    ids = tok.encode("Hello world")
    assert 101 not in ids and 102 not in ids  # no [CLS]/[SEP] added by encode
    assert tok.decode(ids) == "hello world"
    assert tok.special_tokens["[CLS]"] == 101
    assert tok.encode_batch(["a b", "c"]) == [tok.encode("a b"), tok.encode("c")]


def test_hf_local_dir(tmp_path):
    from ctxkit.io.tokenizers import minilm_path

    tok = get_tokenizer(f"hf:{minilm_path()}")
    assert tok.encode("Hello world") == get_tokenizer("minilm").encode("Hello world")
    with pytest.raises(InputError, match="is not a tokenizer directory"):
        get_tokenizer(f"hf:{tmp_path / 'missing'}")


def test_unknown_name_lists_available():
    with pytest.raises(ValueError, match="available: .*cl100k_base.*minilm"):
        get_tokenizer("no-such-tokenizer")
    assert "cl100k_base" in available_tokenizers()


def test_resolve_accepts_objects():
    tok = get_tokenizer("cl100k_base")
    assert resolve_tokenizer(tok) is tok
    with pytest.raises(InputError):
        resolve_tokenizer(42)
