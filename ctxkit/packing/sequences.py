"""Packing token sequences: :func:`pack` (lists of token ids) and :func:`pack_arrays` (the
same sequences concatenated, as Arrow columns hold them).

Both validate the input at the boundary (1-D integer sequences, no negative token id, masks and
labels aligned with the tokens), append the separator after every sequence when one is given
(:func:`add_separators`), plan on integer lengths
(:func:`ctxkit.packing.plan.pack_lengths`) and collate the plan to arrays
(:func:`ctxkit.packing.tensors.collate_plan`). Options are
:class:`~ctxkit.packing.options.PackOptions`; every keyword default comes from it.

Example:
    >>> batch = pack([[5, 6, 7], [8, 9], [1, 2, 3, 4]], capacity=5)
    >>> batch.input_ids.shape, batch.n_windows, batch.lower_bound
    ((2, 5), 2, 2)
    >>> batch.position_ids.tolist()
    [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError
from ctxkit.packing.options import MAX_TOKEN_ID, PackOptions
from ctxkit.packing.plan import pack_lengths
from ctxkit.packing.result import PackResult
from ctxkit.packing.tensors import collate_plan

__all__ = ["add_separators", "pack", "pack_arrays", "required_capacity"]

_EMPTY = np.zeros(0, np.int64)
_D = PackOptions()  # the defaults of every keyword below come from here


def _as_int_arrays(sequences: Any, what: str, name: str,
                   token_ids: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate sequences of ints into one int64 array plus per-sequence lengths.

    ``name`` is the argument (for errors); with ``token_ids`` a negative value is an error, as
    no vocabulary has negative ids.
    """
    if isinstance(sequences, (str, bytes)) or not validate.is_collection(sequences):
        raise InputError(f"{name} must be a list of token id lists, got "
                         f"{type(sequences).__name__}")
    arrays = []
    for i, seq in enumerate(sequences):
        if isinstance(seq, (str, bytes)) or seq is None:
            raise InputError(f"{what} {i} must be a 1-D sequence of ints, got "
                             f"{type(seq).__name__}")
        arr = np.asarray(seq)
        if arr.ndim != 1:
            raise InputError(f"{what} {i} must be a 1-D sequence of ints, got shape {arr.shape}")
        if arr.size and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
            raise InputError(f"{what} {i} must hold integers, got dtype {arr.dtype}")
        if token_ids and arr.size:
            _check_ids(arr, f"{what} {i}")
        arrays.append(arr.astype(np.int64, copy=False))
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays) if arrays else _EMPTY
    return flat, lengths


def _check_ids(ids: np.ndarray, where: str) -> None:
    """Every id in ``0..MAX_TOKEN_ID``; checked before any cast to int64 could wrap it."""
    low, high = ids.min(), ids.max()
    if low < 0:
        raise InputError(f"{where} holds the negative token id {int(low)}")
    if high > MAX_TOKEN_ID:
        raise InputError(f"{where} holds the token id {int(high):,}, above {MAX_TOKEN_ID:,} "
                         "(2**31 - 1); no vocabulary is that large")


def pack(
    sequences: Sequence[Sequence[int]],
    *,
    capacity: int = _D.capacity,
    strategy: str = _D.strategy,
    separator_id: int | None = _D.separator_id,
    completion_mask: Sequence[Sequence[int]] | None = None,
    overflow: str = _D.overflow,
    pad_id: int = _D.pad_id,
    seed: int | None = _D.seed,
    layout: str = _D.layout,
    label_separators: bool = _D.label_separators,
    labels: Sequence[Sequence[int]] | None = None,
    options: PackOptions | None = None,
) -> PackResult:
    """Pack token sequences into windows of ``capacity`` tokens and collate them.

    Args:
        sequences: token id lists (or 1-D int arrays), one per example.
        capacity: window length in tokens (the separator counts).
        strategy: ``bfd``, ``ffd``, ``wrapped``, ``greedy`` or ``optimal`` (see ``pack_lengths``).
        separator_id: appended after every sequence (e.g. the EOS id) when given.
        completion_mask: per sequence, 1 where the token is a training target and 0 where it
            is prompt; masked tokens get label -100.
        overflow: what to do with sequences longer than ``capacity``: ``error``, ``split``
            (into several segments), ``truncate`` or ``drop``; all reported on the batch.
        pad_id: id used for padding in the padded layout.
        seed: shuffles windows deterministically (training wants shuffled windows).
        layout: ``padded`` (``[rows, capacity]``) or ``flat`` (``[1, T]``, padding-free).
        label_separators: keep the separator as a label (the model learns to emit EOS).
        labels: per sequence label ids to use instead of the token ids (-100 kept as is).
        options: a :class:`~ctxkit.packing.options.PackOptions` holding all of the above;
            keywords that differ from the defaults override it.

    Example:
        >>> b = pack([[11, 12, 13], [21, 22]], capacity=8, separator_id=0, layout="flat")
        >>> b.input_ids.tolist(), b.labels.tolist()
        ([[11, 12, 13, 0, 21, 22, 0]], [[-100, 12, 13, -100, -100, 22, -100]])
    """
    opts = PackOptions.resolve(
        options, capacity=capacity, strategy=strategy, separator_id=separator_id,
        overflow=overflow, pad_id=pad_id, seed=seed, layout=layout,
        label_separators=label_separators)
    flat, lengths = _as_int_arrays(sequences, "sequence", "sequences", token_ids=True)
    keep = None
    if completion_mask is not None:
        mflat, mlen = _as_int_arrays(completion_mask, "completion_mask", "completion_mask")
        if len(mlen) != len(sequences):
            raise InputError(f"completion_mask has {len(completion_mask)} entries "
                             f"for {len(sequences)} sequences")
        bad = np.flatnonzero(mlen != lengths)
        if bad.size:
            i = int(bad[0])
            raise InputError(
                f"completion_mask {i} has {mlen[i]} entries for a sequence of {lengths[i]} tokens")
        keep = mflat
    label_src = None
    if labels is not None:
        label_src, llen = _as_int_arrays(labels, "labels", "labels")
        if len(llen) != len(sequences):
            raise InputError(f"labels has {len(labels)} entries for {len(sequences)} sequences")
        bad = np.flatnonzero(llen != lengths)
        if bad.size:
            i = int(bad[0])
            raise InputError(f"labels {i} has {llen[i]} entries for {lengths[i]} tokens")
    return pack_arrays(flat, lengths, completion_mask=keep, labels=label_src, options=opts)


def required_capacity(capacity: int | None, options: PackOptions | None, who: str) -> None:
    if capacity is None and options is None:
        raise InputError(f"{who} needs capacity (or options=PackOptions(capacity=...))")


def add_separators(
    tokens: np.ndarray, lengths: np.ndarray, separator_id: int,
    keep: np.ndarray | None = None, labels: np.ndarray | None = None,
    label_separators: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Append ``separator_id`` after every non-empty sequence of the concatenated ``tokens``.

    Returns the new tokens and lengths, the loss mask (``keep`` extended; separators are kept
    only with ``label_separators``) and ``labels`` extended (the separator labels itself).

    Example:
        >>> t, n, keep, _ = add_separators(np.array([5, 6, 7]), np.array([2, 0, 1]), 0)
        >>> t.tolist(), n.tolist(), keep.tolist()
        ([5, 6, 0, 7, 0], [3, 0, 2], [True, True, False, True, False])
    """
    ext_len = lengths + (lengths > 0)  # an empty sequence stays empty
    is_sep = np.zeros(int(ext_len.sum()), dtype=bool)
    is_sep[(np.cumsum(ext_len) - 1)[lengths > 0]] = True
    is_tok = ~is_sep
    ext = np.full(is_sep.size, int(separator_id), dtype=np.int64)
    ext[is_tok] = tokens
    keep_ext = np.full(is_sep.size, bool(label_separators))
    keep_ext[is_tok] = True if keep is None else keep
    labels_ext = None
    if labels is not None:
        labels_ext = np.full(is_sep.size, int(separator_id), dtype=np.int64)
        labels_ext[is_tok] = labels
    return ext, ext_len, keep_ext, labels_ext


def pack_arrays(
    tokens: np.ndarray,
    lengths: np.ndarray,
    *,
    capacity: int | None = None,
    strategy: str = _D.strategy,
    separator_id: int | None = _D.separator_id,
    completion_mask: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    overflow: str = _D.overflow,
    pad_id: int = _D.pad_id,
    seed: int | None = _D.seed,
    layout: str = _D.layout,
    label_separators: bool = _D.label_separators,
    options: PackOptions | None = None,
) -> PackResult:
    """:func:`pack` on sequences already concatenated: ``tokens`` holds them back to back.

    ``lengths[i]`` is sequence ``i``'s token count; ``completion_mask`` and ``labels``, when
    given, are aligned with ``tokens``. This is the zero-copy entry for Arrow columns
    (their values and offsets) and for the CLI. ``capacity`` is required unless ``options``
    carries it.

    Example:
        >>> pack_arrays(np.array([1, 2, 3]), np.array([2, 1]), capacity=4).input_ids.tolist()
        [[1, 2, 3, 0]]
    """
    required_capacity(capacity, options, "pack_arrays")
    opts = PackOptions.resolve(
        options, capacity=capacity, strategy=strategy, separator_id=separator_id,
        overflow=overflow, pad_id=pad_id, seed=seed, layout=layout,
        label_separators=label_separators)
    flat = np.asarray(tokens)
    if flat.size and not np.issubdtype(flat.dtype, np.integer):
        raise InputError(f"tokens must hold integers, got dtype {flat.dtype}")
    if flat.size:
        _check_ids(flat, "tokens")
    flat = flat.astype(np.int64, copy=False)
    lengths = np.asarray(lengths, dtype=np.int64)
    if flat.ndim != 1 or lengths.ndim != 1 or int(lengths.sum()) != flat.size:
        raise InputError(
            f"tokens must be 1-D with len == sum(lengths) ({flat.size} vs {int(lengths.sum())})")
    keep = None if completion_mask is None else np.asarray(completion_mask) != 0
    label_src = None if labels is None else np.asarray(labels, dtype=np.int64)
    for name, arr in (("completion_mask", keep), ("labels", label_src)):
        if arr is not None and arr.shape != flat.shape:
            raise InputError(f"{name} must align with tokens ({arr.shape} vs {flat.shape})")
    if opts.separator_id is not None:
        flat, lengths, keep, label_src = add_separators(
            flat, lengths, opts.separator_id, keep, label_src, opts.label_separators)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else _EMPTY
    plan = pack_lengths(lengths, capacity=opts.capacity, strategy=opts.strategy,
                        overflow=opts.overflow,
                        seed=opts.seed)
    return collate_plan(
        plan, flat, offsets, lengths, label_source=label_src, label_keep=keep,
        pad_id=opts.pad_id, layout=opts.layout,
    )
