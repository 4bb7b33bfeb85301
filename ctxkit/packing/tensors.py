"""Collation: a packing plan and the concatenated token ids to a :class:`PackResult`'s arrays.

:func:`collate_plan` gathers the tokens of every segment of a plan (from
:func:`ctxkit.packing.plan.pack_lengths`) into one of two layouts:

- ``"padded"``: ``[rows, capacity]`` arrays, each row one context window holding whole segments
  and then padding;
- ``"flat"``: the padding-free ``[1, T]`` layout of transformers' ``DataCollatorWithFlattening``
  (and TRL's padding-free path): every segment concatenated, ``position_ids`` restarting per
  segment.

Inside a window no token may see another segment: ``position_ids`` restart at 0,
``segment_ids`` and ``cu_seqlens`` mark the boundaries, and ``labels`` are -100 on padding,
wherever the loss mask is False and on the first token of every segment, so no loss term
predicts one segment from another. Collation is vectorised: a few numpy passes over the tokens
and no Python step per segment. Before gathering, the plan is checked to place every token of
every input exactly once (or report it), so a plan bug is an error, not lost tokens.

Example:
    >>> import numpy as np
    >>> from ctxkit.packing.plan import pack_lengths
    >>> plan = pack_lengths([3, 2], capacity=4)
    >>> batch = collate_plan(plan, np.array([5, 6, 7, 8, 9]), np.array([0, 3]), np.array([3, 2]))
    >>> batch.input_ids.tolist(), batch.labels.tolist()
    ([[5, 6, 7, 0], [8, 9, 0, 0]], [[-100, 6, 7, -100], [-100, 9, -100, -100]])
"""

from __future__ import annotations

import numpy as np

from ctxkit.errors import InternalError
from ctxkit.packing.options import LAYOUTS, check_choice
from ctxkit.packing.plan import PackLengthsResult
from ctxkit.packing.result import IGNORE_INDEX, PackResult

__all__ = ["collate_plan", "plan_segments"]

_EMPTY = np.zeros(0, np.int64)


def plan_segments(plan: PackLengthsResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per segment of ``plan``: window, input index, start, stop (int64 arrays), in row order.

    Example:
        >>> from ctxkit.packing.plan import pack_lengths
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
