"""Text normalization shared by exact and MinHash dedup, vectorized over many texts.

Every step is an option, so a user can say what "the same text" means for their data:
Unicode NFKC, case folding, whitespace folding (runs of whitespace become one space, ends
stripped) and an optional punctuation strip (punctuation and symbols become whitespace).

NFKC and case folding run once in C over all texts joined by NUL; whitespace and punctuation
folding run in numpy on the code points (a regex over the joined text is ten times slower),
which is what makes MinHash signatures from raw text fast.

Example:
    >>> normalize_texts(["  Hello,\\tWORLD! ", "hello, world!"])
    ['hello, world!', 'hello, world!']
    >>> normalize_texts(["Hello, World!"], punctuation=True)
    ['hello world']
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "Normalization",
    "codepoints_to_texts",
    "normalize_text",
    "normalize_texts",
    "normalized_codepoints",
]

_SEP = "\x00"
_BMP = 0x10000


@dataclass(frozen=True)
class Normalization:
    """Which normalizations to apply (all but ``punctuation`` on by default)."""

    nfkc: bool = True
    case: bool = True
    whitespace: bool = True
    punctuation: bool = False

    def with_options(self, **options: bool) -> Normalization:
        unknown = set(options) - set(self.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown normalization option(s): {sorted(unknown)}")
        return replace(self, **options) if options else self


@functools.cache
def _space_table() -> np.ndarray:
    """Boolean table over the BMP: what ``str.isspace`` says (no whitespace lies above it)."""
    return np.array([chr(c).isspace() for c in range(_BMP)], dtype=bool)


@functools.cache
def _punct_table() -> np.ndarray:
    """Boolean table over the BMP: neither a letter/digit nor whitespace, or an underscore."""
    return np.array(
        [not (ch.isalnum() or ch.isspace()) or ch == "_" for ch in map(chr, range(_BMP))],
        dtype=bool,
    )


def _lookup(cps: np.ndarray, table: np.ndarray, above: callable) -> np.ndarray:
    """table[cps] for BMP code points; `above(char)` decides the (rare) astral ones."""
    small = cps < _BMP
    out = table[np.where(small, cps, 0)]
    if not small.all():
        big = np.flatnonzero(~small)
        vals, inv = np.unique(cps[big], return_inverse=True)
        out[big] = np.array([above(chr(int(v))) for v in vals], dtype=bool)[inv]
    return out


def _to_codepoints(text: str) -> np.ndarray:
    # utf-32 gives one element per Python character; surrogatepass keeps lone surrogates.
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _fold(text: str, norm: Normalization) -> str:
    """NFKC and case folding of one text, as the options ask.

    ASCII text is already NFKC and ``lower()`` equals ``casefold()`` on it (and is faster);
    ``str.isascii()`` is a flag lookup, so only other texts pay for the Unicode rules.
    """
    if text.isascii():
        return text.lower() if norm.case else text
    if norm.nfkc:
        text = unicodedata.normalize("NFKC", text)
    return text.casefold() if norm.case else text


def normalized_codepoints(
    texts: Sequence[str], norm: Normalization | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Normalize many texts into one uint32 code-point array plus per-text offsets.

    Text ``i`` is ``cps[offsets[i]:offsets[i + 1]]``. ``norm=None`` uses the defaults; pass
    ``Normalization(nfkc=False, case=False, whitespace=False)`` to shingle raw text.

    Example:
        >>> cps, off = normalized_codepoints([" A  b ", "c"])
        >>> off.tolist(), "".join(map(chr, cps))
        ([0, 3, 4], 'a bc')
    """
    norm = norm or Normalization()
    n = len(texts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if n == 0:
        return np.empty(0, dtype=np.uint32), offsets
    if n > 1:
        joined = _SEP.join([_fold(t, norm) for t in texts])
        if joined.count(_SEP) != n - 1:
            # A text holds NUL itself, so boundaries cannot be found after joining: one by one.
            return _one_by_one(texts, norm)
        parts = joined.split(_SEP)
        if len(parts) != n:  # NFKC/casefold never create NUL; guard rather than misalign
            return _one_by_one(texts, norm)
    else:
        parts = [_fold(texts[0], norm)]
    fold_only = norm.whitespace and not norm.punctuation
    if fold_only:
        # Stripped texts cannot start or end with whitespace, so folding below only has to
        # collapse inner runs: a plain string method per text is cheaper than masks for ends.
        parts = [p.strip() for p in parts]
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    cps = _to_codepoints("".join(parts))
    if not (norm.whitespace or norm.punctuation) or len(cps) == 0:
        return cps, offsets
    space = _lookup(cps, _space_table(), str.isspace)
    if fold_only:
        # Keep every non-space and the first space of each run, as " ".
        cps = cps.copy()
        np.putmask(cps, space, np.uint32(32))
        dropped = np.flatnonzero(space[1:] & space[:-1]) + 1
        if len(dropped):
            cps = np.delete(cps, dropped)
            offsets -= np.searchsorted(dropped, offsets)
        return cps, offsets
    punct = _lookup(cps, _punct_table(), lambda c: not (c.isalnum() or c.isspace()) or c == "_")
    if not norm.whitespace:
        return _compact(cps, offsets, ~punct)
    return _fold_whitespace(cps, offsets, space | punct)


def _one_by_one(texts: Sequence[str], norm: Normalization) -> tuple[np.ndarray, np.ndarray]:
    parts = [normalized_codepoints([t], norm)[0] for t in texts]
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return np.concatenate(parts), offsets


def _compact(
    cps: np.ndarray, offsets: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Drop the positions where keep is False, and shift the offsets to match."""
    kept_before = np.zeros(len(cps) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept_before[1:])
    return cps[keep], kept_before[offsets]


def _fold_whitespace(
    cps: np.ndarray, offsets: np.ndarray, space: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each run of whitespace becomes one " "; runs at a text's start or end disappear."""
    m = len(cps)
    idx = np.arange(m, dtype=np.int64)
    starts = np.zeros(m, dtype=bool)
    starts[offsets[:-1][offsets[:-1] < m]] = True
    prev_space = np.concatenate([[True], space[:-1]]) | starts
    first_of_run = space & ~prev_space
    # A run is kept only when a non-space character follows it inside the same text.
    lengths = np.diff(offsets)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    last_char = np.full(len(lengths), -1, dtype=np.int64)
    nonempty = lengths > 0
    last_char[nonempty] = np.maximum.reduceat(np.where(space, -1, idx), offsets[:-1][nonempty])
    keep = ~space | (first_of_run & (idx < last_char[seg]))
    cps = np.where(space, np.uint32(32), cps)
    return _compact(cps, offsets, keep)


def codepoints_to_texts(cps: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The inverse of :func:`normalized_codepoints`' packing: one string per text."""
    whole = cps.astype(np.uint32, copy=False).tobytes().decode("utf-32-le", "surrogatepass")
    return [whole[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]


def normalize_texts(
    texts: Sequence[str], norm: Normalization | None = None, **options: bool
) -> list[str]:
    """Normalize many texts; options (nfkc, case, whitespace, punctuation) override ``norm``.

    Example:
        >>> normalize_texts(["Ünïcode  TEXT\\n"], nfkc=False)
        ['ünïcode text']
    """
    norm = (norm or Normalization()).with_options(**options)
    return codepoints_to_texts(*normalized_codepoints(texts, norm))


def normalize_text(text: str, norm: Normalization | None = None, **options: bool) -> str:
    """Normalize one text (see :func:`normalize_texts`)."""
    return normalize_texts([text], norm, **options)[0]
