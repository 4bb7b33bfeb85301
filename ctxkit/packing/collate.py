"""Collation: turn a packing plan into training tensors without cross-contamination.

:func:`pack` plans on integer lengths (:func:`ctxkit.packing.plan.pack_lengths`) and then
collates the token ids into one of two layouts:

- ``"padded"``: ``[rows, capacity]`` arrays, each row one context window holding whole segments
  (each followed by the separator when one is given) and then padding;
- ``"flat"``: the padding-free ``[1, T]`` layout of transformers' ``DataCollatorWithFlattening``
  (and TRL's padding-free path): every segment concatenated, ``position_ids`` restarting per
  segment, ``cu_seq_lens_q/k``, ``max_length_q/k`` and ``seq_idx``; no ``attention_mask``.

Inside a window no token may see another segment: ``position_ids`` restart at 0, the
block-diagonal :meth:`PackResult.attention_mask` and ``cu_seqlens`` mark the boundaries, and
``labels`` are -100 on padding, separators (unless ``label_separators``), tokens whose
``completion_mask`` is 0 and the first token of every segment, so no loss term predicts one
segment from another. Collation is vectorised: its cost is a few numpy passes over the tokens
plus one Python step per segment at most.

Example:
    >>> batch = pack([[5, 6, 7], [8, 9], [1, 2, 3, 4]], capacity=5)
    >>> batch.input_ids.shape, batch.n_windows, batch.lower_bound
    ((2, 5), 2, 2)
    >>> batch.position_ids.tolist()
    [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError, InternalError
from ctxkit.packing.options import LAYOUTS, PackOptions, check_choice
from ctxkit.packing.plan import PackLengthsResult, pack_lengths

__all__ = [
    "IGNORE_INDEX",
    "LAYOUTS",
    "PackOptions",
    "PackResult",
    "PackedCollator",
    "add_separators",
    "collate_plan",
    "pack",
    "pack_arrays",
    "plan_segments",
]

IGNORE_INDEX = -100  # what torch's cross entropy and transformers skip

_EMPTY = np.zeros(0, np.int64)
_D = PackOptions()  # the defaults of every keyword below come from here


@dataclass
class PackResult:
    """Packed token arrays plus where every token came from and what packing achieved.

    Arrays are ``[rows, capacity]`` for ``layout="padded"`` and ``[1, T]`` for ``"flat"``.
    ``cu_seqlens`` are the varlen boundaries over the row-major flattened tokens; in the padded
    layout each row's padding tail counts as one extra span of its own, so
    ``cu_seqlens[-1] == input_ids.size`` and a varlen kernel can run on the flattened rows
    directly. ``sources[r]`` lists the input index of each segment in row ``r`` and
    ``pieces[r]`` its ``(input index, start, stop)`` token range (separator included); both are
    built on first use from the flat ``segment_input``/``segment_start``/``segment_stop`` arrays
    (all segments in row order; row ``r`` holds ``row_offsets[r]:row_offsets[r + 1]``).
    """

    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    segment_ids: np.ndarray
    cu_seqlens: np.ndarray
    layout: str
    capacity: int
    segment_input: np.ndarray
    segment_start: np.ndarray
    segment_stop: np.ndarray
    row_offsets: np.ndarray
    n_windows: int
    lower_bound: int
    total_tokens: int
    strategy: str
    split: np.ndarray = field(default_factory=lambda: _EMPTY)
    truncated: np.ndarray = field(default_factory=lambda: _EMPTY)
    dropped: np.ndarray = field(default_factory=lambda: _EMPTY)
    empty: np.ndarray = field(default_factory=lambda: _EMPTY)
    tokens_truncated: int = 0

    @property
    def utilization(self) -> float:
        """Real tokens / (windows * capacity), as the plan counts them."""
        return self.total_tokens / (self.n_windows * self.capacity) if self.n_windows else 0.0

    @property
    def padding_tokens(self) -> int:
        return self.n_windows * self.capacity - self.total_tokens

    @property
    def n_segments(self) -> int:
        return int(self.segment_input.size)

    @functools.cached_property
    def sources(self) -> list[np.ndarray]:
        """Per row, the input index of each segment."""
        return np.split(self.segment_input, self.row_offsets[1:-1]) if self.n_windows else []

    @functools.cached_property
    def seq_lengths(self) -> list[np.ndarray]:
        """Per row, the length of each segment."""
        lengths = self.segment_stop - self.segment_start
        return np.split(lengths, self.row_offsets[1:-1]) if self.n_windows else []

    @functools.cached_property
    def pieces(self) -> list[list[tuple[int, int, int]]]:
        """Per row, the ``(input index, start, stop)`` token range of each segment."""
        triples = list(zip(self.segment_input.tolist(), self.segment_start.tolist(),
                           self.segment_stop.tolist()))
        off = self.row_offsets.tolist()
        return [triples[a:b] for a, b in zip(off[:-1], off[1:])]

    @property
    def max_seqlen(self) -> int:
        spans = np.diff(self.cu_seqlens)
        return int(spans.max()) if spans.size else 0

    def seq_idx(self) -> np.ndarray:
        """Per token, the 0-based index of its segment in the whole batch (-1 on padding)."""
        flat = self.segment_ids.reshape(-1).astype(np.int64)
        if self.layout == "flat":
            return (flat - 1).reshape(self.segment_ids.shape)
        rows = np.repeat(self.row_offsets[:-1], self.segment_ids.shape[1])
        return np.where(flat > 0, rows + flat - 1, -1).reshape(self.segment_ids.shape)

    def attention_mask(self, *, causal: bool = False) -> np.ndarray:
        """Block-diagonal boolean mask ``[rows, 1, L, L]``: True where query may see key.

        A token sees only tokens of its own segment (and, with ``causal``, only earlier ones).
        Padding tokens see only themselves, so no softmax row is empty (an all-masked row
        yields NaN in eager attention); no real token ever sees padding.

        Example:
            >>> pack([[1, 2], [3]], capacity=4).attention_mask()[0, 0].astype(int).tolist()
            [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
        """
        seg = self.segment_ids
        mask = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
        length = seg.shape[1]
        eye = np.eye(length, dtype=bool)[None]
        if causal:
            mask &= np.tri(length, dtype=bool)[None]
        mask |= eye
        return mask[:, None]

    def as_dict(self, *, attention_mask: bool = False, causal: bool = True) -> dict[str, Any]:
        """Model inputs as numpy arrays (see :meth:`to_torch` for the keys)."""
        if self.layout == "flat":
            cu = self.cu_seqlens.astype(np.int32)
            return {
                "input_ids": self.input_ids,
                "labels": self.labels,
                "position_ids": self.position_ids,
                "cu_seq_lens_q": cu,
                "cu_seq_lens_k": cu,
                "max_length_q": self.max_seqlen,
                "max_length_k": self.max_seqlen,
                "seq_idx": self.seq_idx().astype(np.int32),
            }
        batch: dict[str, Any] = {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "position_ids": self.position_ids,
            "segment_ids": self.segment_ids,
        }
        if attention_mask:
            batch["attention_mask"] = self.attention_mask(causal=causal)
        return batch

    def to_torch(self, *, attention_mask: bool = False, causal: bool = True) -> dict[str, Any]:
        """Model inputs as torch tensors.

        ``flat``: exactly the keys and dtypes of transformers'
        ``DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)``.
        ``padded``: ``input_ids``, ``labels``, ``position_ids``, ``segment_ids`` and, with
        ``attention_mask=True``, the 4-D boolean block mask (causal by default, as a causal LM
        given a ready 4-D mask expects).

        transformers detects the segments of the flat layout from ``position_ids`` only when
        the model runs without a KV cache (``use_cache=False``, as in training).
        """
        import torch

        out: dict[str, Any] = {}
        for key, value in self.as_dict(attention_mask=attention_mask, causal=causal).items():
            out[key] = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(
                value, np.ndarray) else value
        return out


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
        if token_ids and arr.size and arr.min() < 0:
            raise InputError(f"{what} {i} holds the negative token id {int(arr.min())}")
        arrays.append(arr.astype(np.int64, copy=False))
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays) if arrays else _EMPTY
    return flat, lengths


def plan_segments(plan: PackLengthsResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per segment of ``plan``: window, input index, start, stop (int64 arrays), in row order.

    Example:
        >>> [a.tolist() for a in plan_segments(pack_lengths([3, 5, 2], capacity=8))]
        [[0, 0, 1], [1, 0, 2], [0, 0, 0], [5, 3, 2]]
    """
    pieces = plan.pieces
    if pieces is not None and all(hasattr(pieces, a) for a in ("src", "start", "stop", "offsets")):
        # flat piece storage (PieceList): no Python step per segment at all
        rows = np.repeat(np.arange(len(pieces.offsets) - 1, dtype=np.int64),
                         np.diff(pieces.offsets))
        return (rows, np.asarray(pieces.src, np.int64), np.asarray(pieces.start, np.int64),
                np.asarray(pieces.stop, np.int64))
    if pieces is None:  # whole (or truncated) inputs
        if hasattr(plan.bins, "flat") and hasattr(plan.bins, "offsets"):
            inp = np.asarray(plan.bins.flat, np.int64)
            sizes = np.diff(np.asarray(plan.bins.offsets, np.int64))
        else:
            sizes = np.fromiter((len(b) for b in plan.bins), dtype=np.int64,
                                count=len(plan.bins))
            inp = (np.concatenate([np.asarray(b, np.int64) for b in plan.bins])
                   if len(plan.bins) else _EMPTY)
        rows = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        start = np.zeros_like(inp)
        stop = np.minimum(plan.lengths[inp], plan.capacity) if inp.size else _EMPTY
        return rows, inp, start, stop.astype(np.int64)
    triples = [(r, i, s, e) for r, segs in enumerate(pieces) for (i, s, e) in segs]
    if not triples:
        return _EMPTY, _EMPTY, _EMPTY, _EMPTY
    arr = np.asarray(triples, dtype=np.int64)
    return arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]


def _check_coverage(plan: PackLengthsResult, inp, start, stop, lengths: np.ndarray) -> None:
    """Every token of every input is placed exactly once unless the plan reports it.

    Cheap (linear in segments) and it turns a plan bug into an error instead of lost tokens.
    """
    n = lengths.size
    if (stop < start).any() or (start < 0).any() or (stop > lengths[inp]).any():
        raise InternalError("packing plan has a token range outside its input")
    placed = np.bincount(inp, weights=stop - start, minlength=n).astype(np.int64)
    expected = lengths.copy()
    expected[plan.dropped] = 0
    expected[plan.truncated] = np.minimum(lengths[plan.truncated], plan.capacity)
    bad = np.flatnonzero(placed != expected)
    if bad.size:
        i = int(bad[0])
        raise InternalError(
            f"packing plan placed {placed[i]} of input {i}'s {expected[i]} tokens "
            f"(strategy {plan.strategy!r}); {bad.size} input(s) affected"
        )
    # overlapping ranges of one input would pass the count check: sort and compare
    order = np.lexsort((start, inp))
    same = inp[order][1:] == inp[order][:-1]
    if (start[order][1:][same] < stop[order][:-1][same]).any():
        raise InternalError("packing plan places some tokens of an input twice")


def collate_plan(
    plan: PackLengthsResult,
    tokens: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    *,
    label_source: np.ndarray | None = None,
    label_keep: np.ndarray | None = None,
    pad_id: int = 0,
    layout: str = "padded",
) -> PackResult:
    """Gather ``tokens`` (all inputs concatenated; input ``i`` at ``offsets[i]``) per ``plan``.

    ``label_source`` (same shape as ``tokens``) gives the label of each token (default: the
    token itself); ``label_keep`` (bool, same shape) is False where the loss must not look.
    Most callers want :func:`pack`, which builds these arrays.
    """
    check_choice(layout, LAYOUTS, "layout")
    capacity = int(plan.capacity)
    rows, inp, start, stop = plan_segments(plan)
    _check_coverage(plan, inp, start, stop, lengths)
    seg_len = stop - start
    if inp.size and (seg_len == 0).any():  # zero-length pieces carry nothing: leave them out
        keep = seg_len > 0
        rows, inp, start, stop, seg_len = rows[keep], inp[keep], start[keep], stop[keep], \
            seg_len[keep]
    n_rows = len(plan.bins) if plan.pieces is None else len(plan.pieces)
    row_used = np.bincount(rows, weights=seg_len, minlength=n_rows).astype(np.int64)
    if (row_used > capacity).any():
        r = int(np.argmax(row_used))
        raise InternalError(f"packing plan fills window {r} with {row_used[r]} > {capacity} tokens")

    total = int(seg_len.sum())
    seg_first = np.concatenate([[0], np.cumsum(seg_len)[:-1]]) if seg_len.size else _EMPTY
    # one pass to tag each output token with its segment; the rest are gathers from
    # per-segment arrays (small, cache resident) and elementwise arithmetic
    tok_seg = np.repeat(np.arange(inp.size, dtype=np.int64), seg_len)
    within = np.arange(total, dtype=np.int64)
    within -= seg_first[tok_seg]
    src = (offsets[inp] + start)[tok_seg]
    src += within
    ids = tokens[src]
    labels = label_source[src] if label_source is not None else ids.copy()
    drop = within == 0  # no loss term may predict a segment's first token from the previous one
    if label_keep is not None:
        drop |= ~label_keep[src]
    labels[drop] = IGNORE_INDEX

    # segment rank inside its row (1..k) and the row's first segment
    n_per_row = np.bincount(rows, minlength=n_rows).astype(np.int64)
    row_first_seg = np.concatenate([[0], np.cumsum(n_per_row)[:-1]]) if n_rows else _EMPTY
    seg_rank = np.arange(inp.size, dtype=np.int64) - row_first_seg[rows] + 1
    row_offsets = np.concatenate([[0], np.cumsum(n_per_row)]).astype(np.int64)

    if layout == "flat":
        shape = (1, total)
        input_ids, out_labels = ids.reshape(shape), labels.reshape(shape)
        position_ids = within.reshape(shape)
        # in flat layout segments are numbered over the whole batch, as DataCollatorWithFlattening
        segment_ids = (tok_seg + 1).astype(np.int32).reshape(shape)
        cu = np.concatenate([[0], np.cumsum(seg_len)]).astype(np.int32)
    else:
        # Rows are filled left to right in output order, so a boolean "real token" mask over
        # [rows, capacity] places the collated stream with one masked assignment per array.
        shape = (n_rows, capacity)
        real = np.arange(capacity)[None, :] < row_used[:, None]
        input_ids = np.full(shape, pad_id, dtype=np.int64)
        out_labels = np.full(shape, IGNORE_INDEX, dtype=np.int64)
        position_ids = np.zeros(shape, dtype=np.int64)
        segment_ids = np.zeros(shape, dtype=np.int32)
        input_ids[real] = ids
        out_labels[real] = labels
        position_ids[real] = within
        segment_ids[real] = seg_rank[tok_seg]
        # spans: every segment, then each row's padding tail (when it has one)
        pad_len = capacity - row_used
        spans_len = np.concatenate([seg_len, pad_len])
        spans_key = np.concatenate([rows * 2, np.arange(n_rows, dtype=np.int64) * 2 + 1])
        spans_pos = np.concatenate([np.arange(inp.size), np.zeros(n_rows, np.int64)])
        order = np.lexsort((spans_pos, spans_key))
        spans_len = spans_len[order]
        spans_len = spans_len[spans_len > 0]
        cu = np.concatenate([[0], np.cumsum(spans_len)]).astype(np.int32)

    return PackResult(
        input_ids=input_ids, labels=out_labels, position_ids=position_ids,
        segment_ids=segment_ids, cu_seqlens=cu, layout=layout, capacity=capacity,
        segment_input=inp, segment_start=start, segment_stop=stop, row_offsets=row_offsets,
        n_windows=n_rows,
        lower_bound=plan.lower_bound, total_tokens=int(plan.total_tokens),
        strategy=plan.strategy, split=np.asarray(plan.split, np.int64),
        truncated=np.asarray(plan.truncated, np.int64),
        dropped=np.asarray(plan.dropped, np.int64), empty=np.asarray(plan.empty, np.int64),
        tokens_truncated=int(plan.tokens_truncated),
    )


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


def _required_capacity(capacity: int | None, options: PackOptions | None, who: str) -> None:
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
    _required_capacity(capacity, options, "pack_arrays")
    opts = PackOptions.resolve(
        options, capacity=capacity, strategy=strategy, separator_id=separator_id,
        overflow=overflow, pad_id=pad_id, seed=seed, layout=layout,
        label_separators=label_separators)
    flat = np.asarray(tokens, dtype=np.int64)
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


class PackedCollator:
    """A ``collate_fn`` that packs each mini-batch of examples into windows.

    Each example is a mapping with ``input_ids`` and optionally ``completion_mask`` (1 on target
    tokens) and/or ``labels`` (-100 kept). Returns torch tensors: for ``layout="flat"`` the keys of
    transformers' ``DataCollatorWithFlattening``; for ``"padded"`` ``input_ids``, ``labels``,
    ``position_ids`` and a causal block-diagonal 4-D boolean ``attention_mask`` (set
    ``attention_mask=False`` to leave it out, e.g. for flash-attention via ``position_ids``).
    transformers hands a ready 4-D mask to the attention kernel as it is: sdpa takes the boolean
    mask; eager attention adds the mask, so convert it there
    (``torch.zeros(m.shape).masked_fill(~m, float("-inf"))``). The flat layout needs no mask
    and works with sdpa, eager and flash-attention when the model runs with ``use_cache=False``.
    The packing options are :class:`~ctxkit.packing.options.PackOptions` (``self.options``);
    ``capacity`` is required unless ``options`` carries it.

    Example:
        >>> collate = PackedCollator(capacity=8, layout="flat")
        >>> batch = collate([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
        >>> batch["position_ids"].tolist()
        [[0, 1, 2, 0, 1]]
    """

    def __init__(
        self,
        *,
        capacity: int | None = None,
        strategy: str = _D.strategy,
        separator_id: int | None = _D.separator_id,
        overflow: str = _D.overflow,
        pad_id: int = _D.pad_id,
        layout: str = _D.layout,
        attention_mask: bool = True,
        label_separators: bool = _D.label_separators,
        seed: int | None = _D.seed,
        options: PackOptions | None = None,
    ):
        _required_capacity(capacity, options, "PackedCollator")
        self.options = PackOptions.resolve(
            options, capacity=capacity, strategy=strategy, separator_id=separator_id,
            overflow=overflow, pad_id=pad_id, seed=seed, layout=layout,
            label_separators=label_separators)
        self.attention_mask = attention_mask

    def pack(self, examples: Sequence[Mapping[str, Any]]) -> PackResult:
        """The :class:`PackResult` of ``examples`` (numpy; use ``__call__`` for tensors)."""
        if isinstance(examples, (str, bytes)) or not validate.is_collection(examples):
            raise InputError(f"examples must be a list of mappings, got "
                             f"{type(examples).__name__}")
        if not examples:
            raise InputError("examples is empty: PackedCollator needs at least one example")
        for i, ex in enumerate(examples):
            if not isinstance(ex, Mapping):
                raise InputError(f"example {i} is {type(ex).__name__}, not a mapping")
            if "input_ids" not in ex:
                raise InputError(f"example {i} has no 'input_ids'")
        ids = [_to_list(ex["input_ids"]) for ex in examples]
        has_mask = ["completion_mask" in ex for ex in examples]
        has_labels = ["labels" in ex for ex in examples]
        if any(has_mask) and not all(has_mask):
            raise InputError("either every example has 'completion_mask' or none does")
        if any(has_labels) and not all(has_labels):
            raise InputError("either every example has 'labels' or none does")
        return pack(
            ids,
            completion_mask=[_to_list(ex["completion_mask"]) for ex in examples]
            if all(has_mask) else None,
            labels=[_to_list(ex["labels"]) for ex in examples] if all(has_labels) else None,
            options=self.options,
        )

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = self.pack(examples).to_torch(attention_mask=self.attention_mask, causal=True)
        batch.pop("segment_ids", None)  # models do not take it; PackedCollator.pack has it
        return batch


def _to_list(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value
