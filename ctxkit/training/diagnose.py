"""Why packed segments leak: the causes a packed batch shows on inspection.

:func:`ctxkit.check_packing` decides *whether* segments leak by comparing logits and loss; this
module names *why*, from the batch alone. Each cause is a :class:`PackingCause` with a code, a
one-line message and the segments it concerns (empty: the whole batch):

- ``positions``: ``position_ids`` do not restart at a segment's start (or are missing), so
  transformers' packed-sequence detection sees one long sequence;
- ``mask_2d``: a 2-D ``attention_mask`` on rows of several segments; it turns that detection
  off (transformers reads ``position_ids`` only when no mask is given), so sdpa and eager
  attend across segments; an all-ones one is the common case;
- ``mask_4d``: a 4-D mask that lets a token see another segment;
- ``mask_bool_eager``: a boolean 4-D mask with eager attention, which adds the mask to the
  scores, so True/False block nothing;
- ``labels_cross``: a label that is not -100 on a segment's first token: the loss predicts it
  from the previous segment's last token;
- ``prompt_loss``: labels on tokens the completion mask (or prompt length) says are prompt;
- ``separator``: a segment that does not end with the separator the batch claims;
- ``use_cache``: the model's config turns the KV cache on, which turns the packed-sequence
  detection off (found by running the model with and without it, :func:`cache_cause`).

Example:
    >>> from ctxkit.training.packed_batch import view_batch
    >>> view = view_batch({"input_ids": [[4, 5, 6, 7]], "labels": [[-100, 5, 6, 7]],
    ...                    "cu_seq_lens_q": [0, 2, 4], "position_ids": [[0, 1, 2, 3]]}, "sdpa")
    >>> [c.code for c in diagnose(view, "sdpa")]
    ['positions', 'labels_cross']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ctxkit.packing.collate import IGNORE_INDEX
from ctxkit.training.packed_batch import BatchView

__all__ = ["BY_INSPECTION", "CAUSES", "PackingCause", "cache_cause", "diagnose"]

CAUSES = ("positions", "mask_2d", "mask_4d", "mask_bool_eager", "labels_cross", "prompt_loss",
          "separator", "use_cache")
# causes that change no logit or loss term, so only inspection can find them
BY_INSPECTION = ("separator",)
_BLOCKED = -1e3  # an additive mask entry at or below this gives the key no weight


@dataclass(frozen=True)
class PackingCause:
    """A reason segments leak, found by inspecting the batch.

    ``segments`` are indices into the batch's segments (row order); empty when the cause
    concerns the whole batch.
    """

    code: str
    message: str
    segments: tuple[int, ...] = ()


def _which(indices: Sequence[int], limit: int = 4) -> str:
    shown = ", ".join(str(i) for i in indices[:limit])
    more = f" and {len(indices) - limit} more" if len(indices) > limit else ""
    return f"segment{'s' if len(indices) > 1 else ''} {shown}{more}"


def _positions(view: BatchView) -> PackingCause | None:
    multi = _rows_with_several(view)
    if view.position_ids is None:
        if not multi:
            return None
        return PackingCause("positions", "the batch has no position_ids, so positions run on "
                            "across the segments of a row instead of restarting at 0")
    base = int(view.position_ids[view.segments[0].row, view.segments[0].start])
    bad = [i for i, s in enumerate(view.segments)
           if not np.array_equal(view.position_ids[s.row, s.start:s.start + s.length],
                                 np.arange(base, base + s.length))]
    if not bad:
        return None
    s = view.segments[bad[0]]
    got = int(view.position_ids[s.row, s.start])
    return PackingCause("positions", f"position_ids do not restart at {base} at the start of "
                        f"{_which(bad)} (segment {bad[0]} starts at {got}), so the model sees "
                        "one long sequence", tuple(bad))


def _rows_with_several(view: BatchView) -> bool:
    rows = [s.row for s in view.segments]
    return len(rows) != len(set(rows))


def _mask(view: BatchView, attn_implementation: str) -> PackingCause | None:
    mask = view.attention_mask
    if mask is None:
        return None
    if mask.ndim == 2:
        if not _rows_with_several(view):
            return None
        kind = "an all-ones" if bool((mask != 0).all()) else "a"
        return PackingCause("mask_2d", f"{kind} 2-D attention_mask on rows of several segments "
                            "turns off transformers' packed-sequence detection (it reads "
                            "position_ids only when no mask is given), so sdpa and eager attend "
                            "across segments; drop the mask")
    if mask.dtype == bool and attn_implementation == "eager":
        return PackingCause("mask_bool_eager", "a boolean 4-D attention_mask with eager "
                            "attention, which adds the mask to the scores, so it blocks "
                            "nothing; pass 0 where allowed and -inf elsewhere")
    allowed = (mask if mask.dtype == bool else mask > _BLOCKED).any(axis=1)  # any head
    key = np.full(view.input_ids.shape, -1)
    for i, s in enumerate(view.segments):
        key[s.row, s.start:s.start + s.length] = i
    cross = allowed & (key[:, :, None] != key[:, None, :]) & (key[:, :, None] >= 0) & \
        (key[:, None, :] >= 0) & np.tri(key.shape[1], dtype=bool)[None]
    if not cross.any():
        return None
    r, q, _ = np.argwhere(cross)[0]
    return PackingCause("mask_4d", f"the 4-D attention_mask lets segment {key[r, q]} see "
                        "earlier segments of its row", (int(key[r, q]),))


def _labels(view: BatchView) -> list[PackingCause]:
    labels = view.labels
    if labels is None:
        return []
    out = []
    cross = [i for i, s in enumerate(view.segments)
             if s.start > 0 and labels[s.row, s.start] != IGNORE_INDEX]
    if cross:
        out.append(PackingCause("labels_cross", f"labels are not -100 on the first token of "
                                f"{_which(cross)}, so the loss predicts it from the previous "
                                "segment's last token", tuple(cross)))
    if view.completion is not None:
        trained = (labels != IGNORE_INDEX) & ~view.completion
        prompt = [i for i, s in enumerate(view.segments)
                  if trained[s.row, s.start + 1:s.start + s.length].any()]
        if prompt:
            n = sum(int(trained[s.row, s.start + 1:s.start + s.length].sum())
                    for s in (view.segments[i] for i in prompt))
            out.append(PackingCause("prompt_loss", f"the loss trains on {n} prompt token(s) of "
                                    f"{_which(prompt)} (completion mask 0, label not -100)",
                                    tuple(prompt)))
    return out


def _separator(view: BatchView, separator_id: int | None) -> PackingCause | None:
    if separator_id is None:
        return None
    bad = [i for i, s in enumerate(view.segments)
           if view.input_ids[s.row, s.start + s.length - 1] != separator_id]
    if not bad:
        return None
    return PackingCause("separator", f"{_which(bad)} do{'es' if len(bad) == 1 else ''} not end "
                        f"with the separator {separator_id} the batch claims, so nothing marks "
                        "where those examples end", tuple(bad))


def cache_cause() -> PackingCause:
    """The cause when the packed logits differ with the model's configured KV cache on and off.

    Example:
        >>> cache_cause().message.split(":")[0]
        'the model is called with use_cache=True (model.config.use_cache)'
    """
    return PackingCause("use_cache", "the model is called with use_cache=True "
                        "(model.config.use_cache): transformers then builds a KV cache, which "
                        "turns off its packed-sequence detection, so sdpa and eager attend "
                        "across segments; set model.config.use_cache = False (transformers' "
                        "Trainer does, from TrainingArguments.use_cache) or pass use_cache=False")


def diagnose(view: BatchView, attn_implementation: str, *,
             separator_id: int | None = None) -> list[PackingCause]:
    """Every cause of contamination that ``view`` shows, in the order of :data:`CAUSES`.

    Example:
        >>> from ctxkit.training.packed_batch import view_batch
        >>> view = view_batch({"input_ids": [[4, 5, 6, 7]], "attention_mask": [[1, 1, 1, 1]],
        ...                    "position_ids": [[0, 1, 0, 1]]}, "sdpa")
        >>> diagnose(view, "sdpa")[0].message.split(" on ")[0]
        'an all-ones 2-D attention_mask'
    """
    if not view.segments:
        return []
    found = [_positions(view), _mask(view, attn_implementation), *_labels(view),
             _separator(view, separator_id)]
    return [c for c in found if c is not None]
