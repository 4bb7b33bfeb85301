"""The dedup stages' options, declared and validated once for every entry point.

:func:`ctxkit.dedup` (``method="minhash"``),
:func:`ctxkit.deduplication.minhash.minhash_dedup`, the distributed
:func:`ctxkit.distributed.minhash_dedup` and the ``ctxkit dedup`` command all build a
:class:`MinHashOptions` from what they are given, and
:func:`~ctxkit.deduplication.semantic.semantic_dedup` a :class:`SemanticOptions`, so defaults
and checks cannot drift apart. Both derive from :class:`ctxkit.options.OptionSet`: a bad value is
an :class:`~ctxkit.errors.OptionError` (a ``ValueError``) naming the option. The rationale of
the defaults is in ``docs/dedup.md``.

Example:
    >>> MinHashOptions().threshold
    0.7
    >>> MinHashOptions(threshold=0.8, unit="word").banding()
    (21, 6)
    >>> MinHashOptions(threshold=1.5)
    Traceback (most recent call last):
    ...
    ctxkit.errors.OptionError: threshold is a Jaccard similarity in (0, 1], got 1.5
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ctxkit.deduplication.lsh import DEFAULT_MAX_BUCKET, choose_bands
from ctxkit.deduplication.normalize import Normalization
from ctxkit.deduplication.signatures import HASHFUNCS, SCHEMES
from ctxkit.options import OptionSet, bad_option

__all__ = [
    "DEFAULT_MAX_BUCKET",
    "DEFAULT_SEMANTIC_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "MinHashOptions",
    "SemanticOptions",
]

# Jaccard of character 5-gram sets; why 0.7, and what it removes on real data: docs/dedup.md.
DEFAULT_THRESHOLD = 0.7
# cosine of sentence embeddings; 0.8 also merges looser paraphrases
DEFAULT_SEMANTIC_THRESHOLD = 0.9
UNITS = ("char", "word")
VERIFY = ("exact", "estimate")
PARTITIONS = ("auto", "exact", "kmeans")
MAX_NUM_PERM = 8192  # estimate error sd <= 0.006 at any threshold


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_at_least(name: str, value: Any, low: int = 1) -> None:
    if not _is_int(value) or value < low:
        raise bad_option(name, f" must be an integer >= {low}, got {value!r}")


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise bad_option(name, f" must be one of {allowed}, got {value!r}")


def _share(name: str, value: Any, what: str, low: float = 0.0) -> float:
    """``value`` as a float in ``(low, 1]``, else an OptionError calling it ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= 1.0:
        raise bad_option(name, f" is {what} in ({low:g}, 1], got {value!r}")
    return float(value)


@dataclass(frozen=True)
class MinHashOptions(OptionSet):
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
        object.__setattr__(self, "threshold",
                           _share("threshold", self.threshold, "a Jaccard similarity"))
        _int_at_least("num_perm", self.num_perm)
        if self.num_perm > MAX_NUM_PERM:
            # a signature costs num_perm x 4 bytes per text: beyond this it is memory, not accuracy
            raise bad_option("num_perm", f" must be at most {MAX_NUM_PERM} (usual: 128-512), "
                                         f"got {self.num_perm}")
        _int_at_least("ngram", self.ngram)
        _choice("unit", self.unit, UNITS)
        if not _is_int(self.seed) or not 0 <= self.seed < 2**32:
            # numpy's RandomState draws the permutations: it takes seeds in [0, 2**32)
            raise bad_option("seed", f" must be an integer in [0, 2**32), got {self.seed!r}")
        if (self.bands is None) != (self.rows is None):
            raise bad_option("bands", ": give both bands and rows, or neither")
        if self.bands is not None:
            _int_at_least("bands", self.bands)
            _int_at_least("rows", self.rows)
            if self.bands * self.rows > self.num_perm:
                raise bad_option("bands", f" * rows = {self.bands * self.rows} exceeds "
                                          f"num_perm = {self.num_perm}")
        if isinstance(self.min_recall, bool) or not isinstance(self.min_recall, (int, float)) \
                or not 0.0 < self.min_recall < 1.0:
            raise bad_option("min_recall", f" must be in (0, 1), got {self.min_recall!r}")
        _int_at_least("max_bucket", self.max_bucket, 2)
        if self.normalization is not None and not isinstance(self.normalization, Normalization):
            raise bad_option("normalization", " must be a ctxkit Normalization (or None)")
        _choice("hashfunc", self.hashfunc, HASHFUNCS)
        _choice("scheme", self.scheme, tuple(SCHEMES))
        _choice("verify", self.verify, VERIFY)
        if self.boilerplate is not None:
            object.__setattr__(self, "boilerplate", _share(
                "boilerplate", self.boilerplate, "a share of the records"))

    _what = "MinHash option"

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
        if options is not None and not isinstance(options, cls):
            raise bad_option("options", f" must be a {cls.__name__} or None, got "
                                        f"{type(options).__name__}")
        given = {k: v for k, v in overrides.items() if v is not None}
        base = options if options is not None else cls()
        return base.replace(**given) if given else base

    def banding(self) -> tuple[int, int]:
        """``(bands, rows)``: as given, or chosen for ``min_recall`` at the threshold."""
        if self.bands is not None:
            return self.bands, self.rows
        return choose_bands(self.threshold, self.num_perm, self.min_recall)

    def shingling(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~ctxkit.deduplication.signatures.hash_values`."""
        return {"ngram": self.ngram, "unit": self.unit, "normalization": self.normalization,
                "hashfunc": self.hashfunc, "scheme": self.scheme}

    def signing(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~ctxkit.deduplication.signatures.signatures`."""
        return {"num_perm": self.num_perm, "seed": self.seed, **self.shingling()}


@dataclass(frozen=True)
class SemanticOptions(OptionSet):
    """What semantic dedup calls a paraphrase, and how it searches for pairs.

    Attributes:
        threshold: cosine similarity of two texts' embeddings at or above which they are
            paraphrases, in [-1, 1].
        partition: ``"exact"`` (all pairs, tile by tile), ``"kmeans"`` (SemDeDup: pairs only
            inside k-means clusters) or ``"auto"`` (exact up to ``exact_max`` texts).
        exact_max: the most texts ``"auto"`` searches exactly.
        n_clusters: k-means clusters (default: about the square root of the text count).
        n_assign: the nearest clusters each text joins.
        seed: seed of the k-means initialisation.
        block: rows per tile of the similarity matrix (memory: ``block**2`` floats).

    Example:
        >>> SemanticOptions(threshold=0.8).partition
        'auto'
    """

    threshold: float = DEFAULT_SEMANTIC_THRESHOLD
    partition: str = "auto"
    exact_max: int = 20_000
    n_clusters: int | None = None
    n_assign: int = 2
    seed: int = 1
    block: int = 2048

    def __post_init__(self) -> None:
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not -1.0 <= t <= 1.0:
            raise bad_option("threshold", f" is a cosine similarity in [-1, 1], got {t!r}")
        object.__setattr__(self, "threshold", float(t))
        _choice("partition", self.partition, PARTITIONS)
        _int_at_least("exact_max", self.exact_max, 0)
        if self.n_clusters is not None:
            _int_at_least("n_clusters", self.n_clusters)
        _int_at_least("n_assign", self.n_assign)
        if not _is_int(self.seed) or not 0 <= self.seed < 2**32:
            raise bad_option("seed", f" must be an integer in [0, 2**32), got {self.seed!r}")
        _int_at_least("block", self.block)

    _what = "semantic dedup option"
