"""A packed batch as :func:`ctxkit.check_packing` sees it: the model's inputs and the segments.

A batch comes as ctxkit's :class:`~ctxkit.packing.collate.PackResult` (``padded`` or ``flat``
layout) or as a mapping of tensors (transformers' ``DataCollatorWithFlattening``, TRL's
padding-free collator, a user's own collator). :func:`view_batch` turns either into a
:class:`BatchView`: the exact keyword arguments the model is called with (what a trainer passes),
the arrays as numpy, and where each segment is. The segments come from what the batch itself
claims, in this order: an explicit ``segments=``, ``cu_seq_lens_q``, ``seq_idx``,
``segment_ids``, restarting ``position_ids``, else one segment per row. A 2-D
``attention_mask`` marks padding (0).

A ``PackResult`` is turned into what a trainer would feed the model's attention implementation:
the flat layout as it is (``to_torch()``); padded rows with the causal block-diagonal 4-D mask
(boolean for sdpa, additive for eager, which adds the mask to the scores), or, for a varlen
kernel (flash-attention, :mod:`ctxkit.training.varlen`), flattened to ``[1, rows * capacity]``
with the batch's ``cu_seqlens``.

Example:
    >>> from ctxkit.packing.collate import pack
    >>> view = view_batch(pack([[5, 6, 7], [8, 9]], capacity=8, layout="flat"), "sdpa")
    >>> [(s.row, s.start, s.length) for s in view.segments]
    [(0, 0, 3), (0, 3, 2)]
    >>> sorted(view.inputs)[:3]
    ['cu_seq_lens_k', 'cu_seq_lens_q', 'input_ids']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.packing.collate import PackResult

__all__ = ["MODEL_KEYS", "BatchView", "Segment", "is_varlen", "view_batch"]

# the keys a trainer hands the model from a packed batch; anything else in a mapping
# (segment_ids, completion_mask, seq_lengths) is bookkeeping the model does not take
MODEL_KEYS = ("input_ids", "labels", "position_ids", "attention_mask", "cu_seq_lens_q",
              "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")
_ROW_KEYS = ("labels", "position_ids", "seq_idx", "segment_ids", "completion_mask")


def is_varlen(attn_implementation: str) -> bool:
    """True for attention that takes segment boundaries (``cu_seq_lens``) instead of a mask.

    Example:
        >>> is_varlen("flash_attention_2"), is_varlen("sdpa")
        (True, False)
    """
    from ctxkit.training.varlen import VARLEN_ATTENTION

    return "flash" in attn_implementation or attn_implementation == VARLEN_ATTENTION


@dataclass(frozen=True)
class Segment:
    """One packed segment: tokens ``start:start + length`` of ``row``."""

    row: int
    start: int
    length: int


@dataclass
class BatchView:
    """A packed batch ready to check.

    ``inputs``: the keyword arguments of the packed forward pass (torch, on the caller's
    device once moved); ``input_ids``, ``labels``, ``position_ids`` and ``completion`` are
    ``[rows, length]`` numpy arrays as the batch gives them (``None`` when absent;
    ``completion`` is True on tokens the loss may train on); ``attention_mask`` is the mask
    passed (2-D or 4-D) or None; ``segments`` in row order. The packed logits come back shaped
    like ``inputs["input_ids"]`` and are reshaped to ``input_ids.shape`` (they differ only for
    padded rows flattened for a varlen kernel).
    """

    inputs: dict[str, Any]
    input_ids: np.ndarray
    labels: np.ndarray | None
    position_ids: np.ndarray | None
    attention_mask: np.ndarray | None
    segments: list[Segment]
    completion: np.ndarray | None = None
    has_boundaries: bool = False  # cu_seq_lens passed to the model


def _numpy(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"batch[{name!r}] is not an array: {exc}") from None


def _runs(key: np.ndarray) -> list[tuple[int, int, int]]:
    """Per row, maximal runs of equal non-negative ``key``: ``(row, start, length)``."""
    out = []
    for r, row in enumerate(key):
        change = np.flatnonzero(np.diff(row)) + 1
        starts = np.concatenate([[0], change])
        stops = np.concatenate([change, [row.size]])
        out.extend((r, int(a), int(b - a)) for a, b in zip(starts, stops) if row[a] >= 0)
    return out


def _key_from_lengths(segments: Sequence[Sequence[int]], shape: tuple[int, int]) -> np.ndarray:
    rows, length = shape
    if len(segments) != rows:
        raise InputError(f"segments has {len(segments)} rows for a batch of {rows}")
    key = np.full(shape, -1, dtype=np.int64)
    for r, lengths in enumerate(segments):
        arr = np.asarray(lengths, dtype=np.int64)
        if arr.ndim != 1 or (arr <= 0).any() or int(arr.sum()) > length:
            raise InputError(f"segments row {r} must list positive lengths summing to at most "
                             f"{length}, got {list(lengths)}")
        key[r, :int(arr.sum())] = np.repeat(np.arange(arr.size), arr)
    return key


def _key_from_cu(cu: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    rows, length = shape
    cu = cu.astype(np.int64).reshape(-1)
    if cu.size < 2 or cu[0] != 0 or (np.diff(cu) < 0).any() or cu[-1] != rows * length:
        raise InputError(f"cu_seq_lens_q must rise from 0 to {rows * length} (the batch's token "
                         f"count), got {cu.tolist()[:8]}{'...' if cu.size > 8 else ''}")
    inner = cu[1:-1]
    if rows > 1 and np.setdiff1d(np.arange(1, rows) * length, inner).size:
        raise InputError("cu_seq_lens_q has a segment that runs across two rows")
    return np.repeat(np.arange(cu.size - 1), np.diff(cu)).reshape(shape)


def _key_from_positions(pos: np.ndarray) -> np.ndarray:
    """Segments where positions restart, as transformers' packed-sequence detection sees them."""
    first = pos[:, :1] - 1
    return (np.diff(pos, axis=1, prepend=first) != 1).cumsum(axis=1)


def _segment_key(arrays: Mapping[str, np.ndarray], shape: tuple[int, int],
                 segments: Sequence[Sequence[int]] | None) -> np.ndarray:
    if segments is not None:
        return _key_from_lengths(segments, shape)
    if "cu_seq_lens_q" in arrays:
        key = _key_from_cu(arrays["cu_seq_lens_q"], shape)
    elif "seq_idx" in arrays:
        key = arrays["seq_idx"].astype(np.int64)
    elif "segment_ids" in arrays:
        key = arrays["segment_ids"].astype(np.int64) - 1
    elif "position_ids" in arrays:
        key = _key_from_positions(arrays["position_ids"].astype(np.int64))
    else:
        key = np.zeros(shape, dtype=np.int64)
    mask = arrays.get("attention_mask")
    if mask is not None and mask.ndim == 2:
        key = np.where(mask != 0, key, -1)
    return key


def _check_shapes(arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
    ids = arrays["input_ids"]
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"batch 'input_ids' must be a 2-D integer array [rows, tokens], got "
                         f"shape {ids.shape} of {ids.dtype}")
    for name in (*_ROW_KEYS, "attention_mask"):
        value = arrays.get(name)
        if value is None:
            continue
        if name == "attention_mask" and value.ndim == 4:
            if value.shape[0] != ids.shape[0] or value.shape[2:] != (ids.shape[1],) * 2:
                raise InputError(f"batch 'attention_mask' has shape {value.shape}; a 4-D mask "
                                 f"must be [{ids.shape[0]}, heads, {ids.shape[1]}, "
                                 f"{ids.shape[1]}]")
        elif value.shape != ids.shape:
            raise InputError(f"batch {name!r} has shape {value.shape}, input_ids {ids.shape}")
    return ids.shape


def _from_mapping(batch: Mapping[str, Any], segments, completion_mask) -> BatchView:
    if "input_ids" not in batch:
        raise InputError(f"batch has no 'input_ids' (keys: {', '.join(map(str, batch))})")
    arrays = {k: _numpy(v, k) for k, v in batch.items()
              if k in (*MODEL_KEYS, "segment_ids", "completion_mask") and v is not None
              and not k.startswith("max_length")}
    if completion_mask is not None:
        arrays["completion_mask"] = _numpy(completion_mask, "completion_mask")
    shape = _check_shapes(arrays)
    key = _segment_key(arrays, shape, segments)
    inputs = {k: v for k, v in batch.items() if k in MODEL_KEYS}
    comp = arrays.get("completion_mask")
    return BatchView(
        inputs=inputs, input_ids=arrays["input_ids"], labels=arrays.get("labels"),
        position_ids=arrays.get("position_ids"), attention_mask=arrays.get("attention_mask"),
        segments=[Segment(*s) for s in _runs(key)],
        completion=None if comp is None else comp != 0,
        has_boundaries="cu_seq_lens_q" in batch)


def _pack_result_inputs(batch: PackResult, attn_implementation: str, dtype) -> dict[str, Any]:
    """What a trainer passes the model for ``batch`` under ``attn_implementation``."""
    import torch

    if batch.layout == "flat":
        return batch.to_torch()
    if is_varlen(attn_implementation):  # the padded rows back to back, with their boundaries
        inputs = {k: v.reshape(1, -1) for k, v in batch.to_torch().items()
                  if k in ("input_ids", "labels", "position_ids")}
        cu = torch.from_numpy(batch.cu_seqlens.astype(np.int32))
        inputs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=batch.max_seqlen,
                      max_length_k=batch.max_seqlen)
        return inputs
    inputs = batch.to_torch(attention_mask=True, causal=True)
    inputs.pop("segment_ids")
    if attn_implementation == "eager":  # eager adds the mask to the scores: make it additive
        allowed = inputs["attention_mask"]
        inputs["attention_mask"] = torch.zeros(allowed.shape, dtype=dtype).masked_fill(
            ~allowed, torch.finfo(dtype).min)
    return inputs


def view_batch(batch: Any, attn_implementation: str, dtype: Any = None, *,
               segments: Sequence[Sequence[int]] | None = None,
               completion_mask: Any = None) -> BatchView:
    """The :class:`BatchView` of ``batch`` for a model whose attention is ``attn_implementation``.

    ``segments`` (per row, the lengths of its segments; the rest of the row is padding)
    overrides what the batch says; ``completion_mask`` (shaped like ``input_ids``, 1 where the
    loss may train) can also come as the batch's ``completion_mask`` key. ``dtype`` is the
    model's float dtype (for an additive mask; default float32).

    Example:
        >>> view = view_batch({"input_ids": [[4, 5, 6, 7]], "position_ids": [[0, 1, 0, 1]]},
        ...                   "sdpa")
        >>> [(s.start, s.length) for s in view.segments]
        [(0, 2), (2, 2)]
    """
    if isinstance(batch, PackResult):
        import torch

        inputs = _pack_result_inputs(batch, attn_implementation, dtype or torch.float32)
        seg = batch.segment_ids.astype(np.int64)
        key = seg - 1 if segments is None else _key_from_lengths(segments, seg.shape)
        comp = None if completion_mask is None else _numpy(completion_mask, "completion_mask")
        if comp is not None and comp.shape != batch.input_ids.shape:
            raise InputError(f"completion_mask has shape {comp.shape}, input_ids "
                             f"{batch.input_ids.shape}")
        return BatchView(
            inputs=inputs, input_ids=batch.input_ids, labels=batch.labels,
            position_ids=batch.position_ids, attention_mask=None,
            segments=[Segment(*s) for s in _runs(key)],
            completion=None if comp is None else comp != 0,
            has_boundaries="cu_seq_lens_q" in inputs or "attention_mask" in inputs)
    if isinstance(batch, Mapping):
        return _from_mapping(batch, segments, completion_mask)
    raise InputError(f"batch must be a ctxkit PackResult or a mapping of tensors (a collator's "
                     f"output), got {type(batch).__name__}")
