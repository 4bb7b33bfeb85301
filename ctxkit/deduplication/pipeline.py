"""``dedup()``: one entry point for exact, MinHash and semantic dedup, alone or chained."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.deduplication.options import DEFAULT_THRESHOLD, MinHashOptions, SemanticOptions
from ctxkit.deduplication.result import DedupResult, combine_stages
from ctxkit.errors import InputError, OptionError

__all__ = ["DEFAULT_THRESHOLDS", "METHODS", "check_threshold", "dedup", "parse_methods"]

METHODS = ("exact", "minhash", "semantic")
# exact has no threshold; MinHash: Jaccard of character 5-grams; semantic: cosine.
DEFAULT_THRESHOLDS = {"minhash": DEFAULT_THRESHOLD, "semantic": 0.9}


def _stage(name: str) -> Callable[..., DedupResult]:
    if name == "exact":
        from ctxkit.deduplication.exact import exact_dedup

        return exact_dedup
    if name == "minhash":
        from ctxkit.deduplication.minhash import minhash_dedup

        return minhash_dedup
    if name == "semantic":
        from ctxkit.deduplication.semantic import semantic_dedup

        return semantic_dedup
    raise InputError(f"unknown dedup method {name!r}; choose from {METHODS}")


def parse_methods(method: str | Sequence[str]) -> list[str]:
    """Stage names from ``"exact,minhash"`` or a sequence, checked (known, none twice)."""
    if isinstance(method, str):
        names = [m.strip() for m in method.split(",")]
    else:
        names = validate.texts(method, "method", "stage")
    if not names:
        raise InputError("method must name at least one of " + ", ".join(METHODS))
    for name in names:
        if name not in METHODS:
            raise InputError(f"method: unknown dedup method {name!r}; choose from {METHODS}")
    if len(set(names)) != len(names):
        raise InputError(f"method lists a stage twice: {names}")
    return names


def check_threshold(threshold: float | Mapping[str, float] | None, names: Sequence[str]) -> None:
    """Every given threshold must be a similarity in (0, 1] for a method that takes one.

    A per-method mapping may name thresholded stages that do not run this time; one bare
    number must reach a stage that has a threshold (exact dedup has none).

    Example:
        >>> check_threshold(1.5, ["exact"])
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: threshold must be a similarity between 0 and 1, got 1.5
        >>> check_threshold(0.8, ["exact"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputError: method exact takes no threshold (exact matches identical ...
    """
    if threshold is None:
        return
    given = dict(threshold) if isinstance(threshold, Mapping) else {None: threshold}
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            where = "threshold" if key is None else f"threshold for {key}"
            zero = " (0 would make everything a duplicate)" if value == 0 else ""
            raise InputError(f"{where} must be a similarity between 0 and 1, got {value!r}{zero}")
    unknown = {k for k in given if k is not None} - set(DEFAULT_THRESHOLDS)
    if unknown:
        raise InputError(f"threshold names unknown method(s) or ones without a threshold: "
                         f"{sorted(unknown)} (thresholds apply to {sorted(DEFAULT_THRESHOLDS)})")
    if not isinstance(threshold, Mapping) and not any(m in DEFAULT_THRESHOLDS for m in names):
        raise InputError(f"method {'+'.join(names)} takes no threshold (exact matches "
                         "identical normalized text)")


def _threshold(threshold: float | Mapping[str, float] | None, name: str) -> float | None:
    if name == "exact":
        return None
    if isinstance(threshold, Mapping):
        return float(threshold.get(name, DEFAULT_THRESHOLDS[name]))
    return DEFAULT_THRESHOLDS[name] if threshold is None else float(threshold)


def _accepted(name: str, fn: Callable[..., DedupResult]) -> set[str]:
    """The keyword options a stage takes (MinHash's are the MinHashOptions fields)."""
    params = {p.name for p in inspect.signature(fn).parameters.values()
              if p.kind is not inspect.Parameter.VAR_KEYWORD}
    return params | MinHashOptions.names() if name == "minhash" else params


# the option set each method takes through ``options=``
_OPTION_SETS = {"minhash": MinHashOptions, "semantic": SemanticOptions}


def _option_sets(given: Any, names: Sequence[str]) -> dict[str, Any]:
    """``options=`` (one option set or several) routed to the stages by type."""
    if given is None:
        return {}
    items = list(given) if isinstance(given, (list, tuple)) else [given]
    out: dict[str, Any] = {}
    for item in items:
        name = next((n for n in names if isinstance(item, _OPTION_SETS.get(n, ()))), None)
        if name is None:
            raise OptionError("options", f"options: a {type(item).__name__} is not the option "
                                         f"set of any selected method ({', '.join(names)}); "
                                         "give MinHashOptions and/or SemanticOptions")
        out[name] = item
    return out


def dedup(
    texts: Sequence[str],
    *,
    method: str | Sequence[str] = "exact",
    threshold: float | Mapping[str, float] | None = None,
    keep: str = "first",
    scores: Sequence[float] | None = None,
    **options: Any,
) -> DedupResult:
    """Remove duplicate texts: ``exact``, ``minhash`` or ``semantic``, or several in order.

    A list (or comma-separated string) of methods runs each stage on the survivors of the
    one before, e.g. ``["exact", "minhash", "semantic"]``; the result always refers to
    indices of ``texts``, and ``duplicate_of`` always points to an item that is kept.

    Args:
        texts: the texts.
        method: ``"exact"``, ``"minhash"``, ``"semantic"``, or a sequence of them.
        threshold: similarity at or above which two texts are duplicates: Jaccard of
            shingle sets for MinHash (default 0.7 with character 5-grams), cosine of
            embeddings for semantic (default 0.9). One float applies to every stage that
            has a threshold; a dict sets it per method. Exact dedup takes none, so a
            threshold with ``method="exact"`` alone is an error.
        keep: the representative kept from each cluster: ``"first"`` (earliest index),
            ``"last"``, ``"longest"``. Clusters are transitive (connected components).
        scores: one number per text (for example an information-density score); when given,
            the highest-scoring member of each cluster is kept (ties: earliest).
        options: passed to the stages that accept them (``seed``, ``num_perm``, ``ngram``,
            ``unit``, ``normalization`` or its fields ``nfkc``/``case``/``whitespace``/
            ``punctuation``, ``encoder``, ``partition``, MinHash's ``boilerplate`` and
            every other :class:`~ctxkit.deduplication.options.MinHashOptions` field...);
            an option no selected stage accepts is an error. ``result.warnings`` says when
            one cluster swallowed a large share of the input (usually a shared template).
            ``options=`` takes a :class:`~ctxkit.deduplication.options.MinHashOptions`, a
            :class:`~ctxkit.deduplication.options.SemanticOptions` or a list of both; each
            goes to its method.

    Example:
        >>> texts = ["Hello world", "hello  world", "Hello world!!", "Bye"]
        >>> dedup(texts).keep.tolist()
        [0, 2, 3]
        >>> r = dedup(texts, method=["exact", "minhash"], threshold=0.5)
        >>> r.keep.tolist(), r.duplicate_of.tolist(), r.method
        ([0, 3], [-1, 0, 0, -1], ['', 'exact', 'minhash', ''])
    """
    texts = validate.texts(texts)
    validate.check_choice(keep, ("first", "last", "longest"), "keep")
    names = parse_methods(method)
    check_threshold(threshold, names)
    n = len(texts)
    if scores is not None and len(scores) != n:
        raise InputError(f"scores must have one value per text ({n}), got {len(scores)}")
    norm_keys = {"nfkc", "case", "whitespace", "punctuation"} & set(options)
    if norm_keys:
        # Shorthand for the normalization shared by exact and MinHash.
        from ctxkit.deduplication.normalize import Normalization

        base = options.pop("normalization", None) or Normalization()
        options["normalization"] = base.with_options(**{k: options.pop(k) for k in norm_keys})
    option_sets = _option_sets(options.pop("options", None), names)
    stages = [(name, _stage(name)) for name in names]
    accepted = {name: _accepted(name, fn) - {"options"} for name, fn in stages}
    unused = set(options) - set().union(*accepted.values())
    if unused:
        raise OptionError(", ".join(sorted(unused)),
                          f"option(s) {sorted(unused)} not accepted by method(s) {names}")
    alive = np.arange(n, dtype=np.int64)
    results: list[tuple[np.ndarray, DedupResult]] = []
    score_arr = None if scores is None else np.asarray(scores, dtype=np.float64)
    for name, fn in stages:
        sub = [texts[i] for i in alive]
        kwargs = {k: v for k, v in options.items() if k in accepted[name]}
        if name in option_sets:
            kwargs["options"] = option_sets[name]
        thr = _threshold(threshold, name)
        # an option set carries its own threshold unless one is given for this method
        given = threshold is not None and (not isinstance(threshold, Mapping) or name in threshold)
        if thr is not None and (given or name not in option_sets):
            kwargs["threshold"] = thr
        res = fn(sub, keep=keep, scores=None if score_arr is None else score_arr[alive], **kwargs)
        results.append((alive, res))
        alive = alive[res.keep]
    return combine_stages(n, results)
