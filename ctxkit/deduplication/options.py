"""MinHash dedup options, declared and validated once for every entry point.

:func:`ctxkit.dedup` (``method="minhash"``),
:func:`ctxkit.deduplication.minhash.minhash_dedup`, the distributed
:func:`ctxkit.distributed.minhash_dedup` and the ``ctxkit dedup`` command all build a
:class:`MinHashOptions` from what they are given, so defaults and checks cannot drift apart.
The rationale of the defaults is in ``docs/dedup.md``.

Example:
    >>> MinHashOptions().threshold
    0.7
    >>> MinHashOptions(threshold=0.8, unit="word").banding()
    (21, 6)
    >>> MinHashOptions(threshold=1.5)
    Traceback (most recent call last):
    ...
    ValueError: threshold is a Jaccard similarity in (0, 1], got 1.5
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ctxkit.deduplication.normalize import Normalization

__all__ = ["DEFAULT_MAX_BUCKET", "DEFAULT_THRESHOLD", "MinHashOptions"]

# Jaccard of character 5-gram sets; why 0.7, and what it removes on real data: docs/dedup.md.
DEFAULT_THRESHOLD = 0.7
# LSH buckets above this size yield a star around a hub instead of all their pairs.
DEFAULT_MAX_BUCKET = 32
SCHEMES = ("affine32", "affine64")
HASHFUNCS = ("fast", "sha1")
UNITS = ("char", "word")
VERIFY = ("exact", "estimate")


MAX_NUM_PERM = 8192  # estimate error sd <= 0.006 at any threshold


def _positive_int(name: str, value: Any, low: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


@dataclass(frozen=True)
class MinHashOptions:
    """Everything that decides what MinHash dedup calls a near-duplicate, validated up front.

    Attributes:
        threshold: Jaccard similarity of the two texts' shingle sets at or above which they
            are near-duplicates, in (0, 1].
        num_perm: permutations per signature.
        ngram: shingle length, in ``unit``\\ s.
        unit: ``"char"`` or ``"word"`` n-grams.
        seed: seed of the permutations (datasketch's ``seed``).
        bands, rows: LSH banding; both or neither (default: :meth:`banding`).
        min_recall: the chance a pair exactly at the threshold becomes a candidate, used to
            choose the banding.
        max_bucket: LSH buckets with more members than this yield a star around one hub
            instead of all their pairs, which keeps the work linear in the corpus.
        normalization: text normalization before shingling (default: NFKC, case, whitespace).
        hashfunc: ``"fast"`` (vectorized) or ``"sha1"`` (datasketch's default, a Python loop).
        scheme: ``"affine32"`` or ``"affine64"`` permutations (datasketch's schemes).
        verify: ``"exact"`` (exact Jaccard for candidates near the threshold) or
            ``"estimate"`` (the signatures' estimate only).
        boilerplate: when set, lines found in at least this share of the records (and in at
            least 5 of them) are left out before shingling, so records that share a
            template are compared on the part that varies
            (:mod:`ctxkit.deduplication.boilerplate`); ``None`` compares whole records.
    """

    threshold: float = DEFAULT_THRESHOLD
    num_perm: int = 128
    ngram: int = 5
    unit: str = "char"
    seed: int = 1
    bands: int | None = None
    rows: int | None = None
    min_recall: float = 0.995
    max_bucket: int = DEFAULT_MAX_BUCKET
    normalization: Normalization | None = None
    hashfunc: str = "fast"
    scheme: str = "affine32"
    verify: str = "exact"
    boilerplate: float | None = None

    def __post_init__(self) -> None:
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0:
            raise ValueError(f"threshold is a Jaccard similarity in (0, 1], got {t!r}")
        object.__setattr__(self, "threshold", float(t))
        _positive_int("num_perm", self.num_perm)
        if self.num_perm > MAX_NUM_PERM:
            # a signature costs num_perm x 4 bytes per text: beyond this it is memory, not accuracy
            raise ValueError(f"num_perm must be at most {MAX_NUM_PERM} (usual: 128-512), got "
                             f"{self.num_perm}")
        _positive_int("ngram", self.ngram)
        _positive_int("max_bucket", self.max_bucket, 2)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        _choice("unit", self.unit, UNITS)
        _choice("hashfunc", self.hashfunc, HASHFUNCS)
        _choice("scheme", self.scheme, SCHEMES)
        _choice("verify", self.verify, VERIFY)
        if (self.bands is None) != (self.rows is None):
            raise ValueError("give both bands and rows, or neither")
        if self.bands is not None:
            _positive_int("bands", self.bands)
            _positive_int("rows", self.rows)
            if self.bands * self.rows > self.num_perm:
                raise ValueError(f"bands * rows = {self.bands * self.rows} exceeds "
                                 f"num_perm = {self.num_perm}")
        if not 0.0 < self.min_recall < 1.0:
            raise ValueError(f"min_recall must be in (0, 1), got {self.min_recall!r}")
        if self.normalization is not None and not isinstance(self.normalization, Normalization):
            raise ValueError("normalization must be a ctxkit Normalization (or None)")
        b = self.boilerplate
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float))
                              or not 0.0 < b <= 1.0):
            raise ValueError(f"boilerplate is a share of the records in (0, 1], got {b!r}")

    @classmethod
    def names(cls) -> frozenset[str]:
        """The option names, as keyword arguments of every MinHash entry point."""
        return frozenset(f.name for f in fields(cls))

    @classmethod
    def build(cls, options: MinHashOptions | None = None, **overrides: Any) -> MinHashOptions:
        """``options`` (or the defaults) with ``overrides`` applied; ``None`` values are
        ignored, so a caller can pass its own unset arguments straight through.

        Example:
            >>> MinHashOptions.build(threshold=None, num_perm=64).num_perm
            64
        """
        unknown = set(overrides) - cls.names()
        if unknown:
            raise TypeError(f"unknown MinHash option(s): {sorted(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        base = options if options is not None else cls()
        return replace(base, **given) if given else base

    def banding(self) -> tuple[int, int]:
        """``(bands, rows)``: as given, or chosen for ``min_recall`` at the threshold."""
        if self.bands is not None:
            return self.bands, self.rows
        from ctxkit.deduplication.minhash import choose_bands

        return choose_bands(self.threshold, self.num_perm, self.min_recall)

    def shingling(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~ctxkit.deduplication.minhash.hash_values`."""
        return {"ngram": self.ngram, "unit": self.unit, "normalization": self.normalization,
                "hashfunc": self.hashfunc, "scheme": self.scheme}

    def signing(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~ctxkit.deduplication.minhash.signatures`."""
        return {"num_perm": self.num_perm, "seed": self.seed, **self.shingling()}

    def describe(self) -> dict[str, Any]:
        """The options as plain data for reports (normalization as its fields)."""
        out = asdict(self)
        out["normalization"] = asdict(self.normalization or Normalization())
        return out
