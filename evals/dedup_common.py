"""Shared pieces of the dedup benchmark: per-section wall time, machine info, precision/recall."""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from ctxkit.deduplication.normalize import Normalization
from evals import _common

RAW = Normalization(nfkc=False, case=False, whitespace=False)


SECTION_SECONDS: dict[str, float] = {}


def section(name: str):
    """Decorator: add the wall time of each call to SECTION_SECONDS[name]."""

    def wrap(fn):
        def inner(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                SECTION_SECONDS[name] = SECTION_SECONDS.get(name, 0.0) + time.perf_counter() - t

        return inner

    return wrap


def machine_info() -> dict[str, Any]:
    """The shared machine record plus the versions of the libraries compared here."""
    info = _common.machine_info()
    for pkg in ("datasketch", "rensa", "scikit-learn", "sentence-transformers"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    return info


def prf(pred: set, gold: set) -> dict[str, float]:
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 1.0
    r = tp / len(gold) if gold else 1.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(2 * p * r / (p + r), 4) if p + r else 0.0,
        "predicted": len(pred),
        "gold": len(gold),
    }
