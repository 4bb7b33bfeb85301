"""Local Hugging Face models, loaded offline, quietly, and only with the head asked for.

transformers fills a head missing from a checkpoint with random numbers and only logs a
"MISSING" report: a directory of a bare encoder loaded as a sequence classifier then predicts
random labels, and a classifier loaded as a causal LM gets a random language-model head. A
wrong result that looks right is worse than an error, so :func:`load_pretrained` refuses a
checkpoint whose ``config.architectures`` names another kind of model, or whose weights lack
any parameter of the model built (``missing_keys``), naming what is missing.

:func:`quiet_loading` keeps transformers' "Loading weights" bars and load reports off the
terminal of a library call; the errors above say what those reports said.

Example:
    >>> load_pretrained("/no/such/dir", "causal LM")
    Traceback (most recent call last):
    ...
    ctxkit.errors.InputError: cannot load a causal LM from /no/such/dir: not a directory
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError

__all__ = ["KINDS", "load_pretrained", "quiet_loading"]

# kind -> (transformers auto class, suffixes of the architecture names of that kind)
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "causal LM": ("AutoModelForCausalLM", ("ForCausalLM", "LMHeadModel")),
    "sequence classifier": ("AutoModelForSequenceClassification",
                            ("ForSequenceClassification",)),
}
_LOCK = threading.RLock()  # the switches below are process-wide: one load at a time flips them


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """No transformers progress bars or warnings inside; their state comes back on exit."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        yield
        return
    with _LOCK:
        bars = hf_logging.is_progress_bar_enabled()
        level = hf_logging.get_verbosity()
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)
            if bars:
                hf_logging.enable_progress_bar()


def load_pretrained(path: str | Path, kind: str, **kwargs: Any) -> Any:
    """The model of ``kind`` (a key of :data:`KINDS`) saved in the directory ``path``.

    Nothing is downloaded. ``kwargs`` go to ``from_pretrained``.

    Raises:
        InputError: ``path`` is not a directory, holds no loadable model, holds a model of
            another kind, or lacks weights of the model (a head transformers would make up).
    """
    import transformers

    auto_name, suffixes = KINDS[kind]
    where = Path(path).expanduser()
    if not where.is_dir():
        raise InputError(f"cannot load a {kind} from {path}: not a directory")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with quiet_loading():
            config = transformers.AutoConfig.from_pretrained(str(where), local_files_only=True)
            _check_architecture(config, where, kind, suffixes)
            model, info = getattr(transformers, auto_name).from_pretrained(
                str(where), local_files_only=True, output_loading_info=True, **kwargs)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to read the user's files is theirs
        # (a pickled checkpoint transformers will not unpickle, a config it cannot parse)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load a {kind} from {where} without the network: "
                         f"{first}") from None
    missing = sorted(info.get("missing_keys") or ())
    mismatched = sorted(str(k[0] if isinstance(k, tuple) else k)
                        for k in info.get("mismatched_keys") or ())
    if missing or mismatched:
        names = missing + mismatched
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        raise InputError(
            f"{where} is not a trained {kind}: its checkpoint lacks {shown} (transformers would "
            f"fill {'them' if len(names) > 1 else 'it'} with random numbers); saved as "
            f"{_architectures(config)}")
    return model


def _architectures(config: Any) -> str:
    names = list(getattr(config, "architectures", None) or ())
    return ", ".join(names) if names else f"a {config.model_type} model with no architecture"


def _check_architecture(config: Any, where: Path, kind: str, suffixes: tuple[str, ...]) -> None:
    names = list(getattr(config, "architectures", None) or ())
    if names and not any(n.endswith(suffixes) for n in names):
        raise InputError(f"{where} holds a {_architectures(config)}, not a {kind} "
                         f"(an architecture ending in {' or '.join(suffixes)})")
