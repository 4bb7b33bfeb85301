"""Per-segment attention for packed batches on any device (transformers attention function).

transformers runs a packed batch through ``sdpa`` or ``eager`` with a block-causal mask over
the whole row: the scores of a row of ``T`` tokens cost ``T**2`` however short its segments
are, and a masked SDPA call cannot use the causal kernel's skipping of the upper triangle. The
segments only need ``sum(len_i**2) / 2``. :func:`segment_attention_forward` finds the segments
(from ``cu_seq_lens_q`` when the batch passes it, else from where ``position_ids`` restart,
within the real tokens of a 2-D padding mask) and runs causal SDPA on each, segments of equal
length stacked into one call. It is what flash-attention's varlen kernel does on a GPU, built
from the kernels every torch has, so CPU training gets the packing speed-up too;
``python -m evals.training`` measures it.

:func:`register_segment_attention` registers it with transformers under
:data:`SEGMENT_ATTENTION`, with the mask function that passes no 4-D mask (the one
flash-attention uses); load a model with ``attn_implementation="ctxkit_segments"`` or call
``model.set_attn_implementation("ctxkit_segments")`` after registering. A 4-D mask given by
the caller is honoured as is through transformers' SDPA path (correct, not faster).

Example:
    >>> import torch
    >>> spans = segment_spans(torch.tensor([[0, 1, 2, 0, 1, 0]]), None, 6)
    >>> [(s.start, s.length) for s in spans]
    [(0, 3), (3, 2), (5, 1)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SEGMENT_ATTENTION", "Span", "register_segment_attention",
           "segment_attention_forward", "segment_spans"]

SEGMENT_ATTENTION = "ctxkit_segments"


@dataclass(frozen=True)
class Span:
    """One segment: tokens ``start:start + length`` of the flattened ``[batch * tokens]`` batch."""

    start: int
    length: int


def segment_spans(position_ids: Any, padding_mask: Any, tokens: int, *,
                  cu_seqlens: Any = None, batch: int = 1) -> list[Span]:
    """The segments of a ``[batch, tokens]`` batch as spans of its flattened tokens.

    Boundaries come from ``cu_seqlens`` (over the flattened tokens) when given, else from
    ``position_ids`` (a segment starts wherever a position is not the previous one plus 1, and
    at every row start), else one segment per row. ``padding_mask`` (2-D, 0 on padding) drops
    padding tokens from every segment; a segment never crosses a row.

    Example:
        >>> import torch
        >>> mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
        >>> [(s.start, s.length) for s in segment_spans(None, mask, 3, batch=2)]
        [(0, 2), (3, 3)]
    """
    import torch

    starts = torch.zeros(batch * tokens, dtype=torch.bool)
    starts[::tokens] = True
    if cu_seqlens is not None:
        cu = cu_seqlens.detach().to("cpu", torch.int64).reshape(-1)
        starts[cu[(cu >= 0) & (cu < starts.numel())]] = True
    elif position_ids is not None:
        pos = position_ids.detach().to("cpu").reshape(-1, position_ids.shape[-1])
        pos = pos.expand(batch, tokens) if pos.shape[0] != batch else pos
        starts.view(batch, tokens)[:, 1:] |= torch.diff(pos, dim=-1) != 1
    keep = torch.ones(batch * tokens, dtype=torch.bool) if padding_mask is None \
        else padding_mask.detach().to("cpu").reshape(-1) != 0
    # a new segment also wherever a kept token follows a dropped one
    starts = keep & (starts | torch.cat([torch.tensor([True]), ~keep[:-1]]))
    kept = torch.nonzero(keep).reshape(-1)
    first = torch.nonzero(starts[kept]).reshape(-1)
    lengths = torch.diff(first, append=torch.tensor([kept.numel()]))
    return [Span(a, n) for a, n in zip(kept[first].tolist(), lengths.tolist())]


def _grouped(spans: list[Span]) -> dict[int, list[int]]:
    """Span starts by length (equal lengths run as one batched call)."""
    groups: dict[int, list[int]] = {}
    for s in spans:
        groups.setdefault(s.length, []).append(s.start)
    return groups


def segment_attention_forward(module: Any, query: Any, key: Any, value: Any,
                              attention_mask: Any, dropout: float = 0.0,
                              scaling: float | None = None, sliding_window: int | None = None,
                              softcap: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention interface: causal SDPA within each segment of the batch.

    ``query`` ``[batch, heads, tokens, dim]`` (``key``/``value`` may have fewer, grouped heads)
    in, ``[batch, tokens, heads, dim]`` out; padding tokens (a 2-D mask's zeros) get zeros.
    """
    import torch

    if attention_mask is not None and attention_mask.ndim == 4:  # the caller's own mask
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    if softcap is not None:
        raise NotImplementedError(f"{SEGMENT_ATTENTION} has no logit softcapping; use eager")
    batch, heads, tokens, dim = query.shape
    spans = segment_spans(kwargs.get("position_ids"), attention_mask, tokens,
                          cu_seqlens=kwargs.get("cu_seq_lens_q"), batch=batch)
    if sliding_window and max(s.length for s in spans) > sliding_window:
        raise NotImplementedError(f"{SEGMENT_ATTENTION} has no sliding window; segments longer "
                                  f"than {sliding_window} tokens need eager or sdpa")
    groups = key.shape[1] != heads
    q = query.transpose(1, 2).reshape(batch * tokens, heads, dim)
    k = key.transpose(1, 2).reshape(batch * tokens, key.shape[1], dim)
    v = value.transpose(1, 2).reshape(batch * tokens, value.shape[1], value.shape[-1])
    outs, order = [], []
    for length, firsts in _grouped(spans).items():
        idx = (torch.tensor(firsts)[:, None] + torch.arange(length)).reshape(-1)
        idx = idx.to(query.device)
        n = len(firsts)

        def take(x, idx=idx, n=n, length=length):
            return x.index_select(0, idx).view(n, length, x.shape[1], x.shape[2]).transpose(1, 2)

        out = torch.nn.functional.scaled_dot_product_attention(
            take(q), take(k), take(v), dropout_p=dropout, scale=scaling, is_causal=True,
            enable_gqa=groups)
        outs.append(out.transpose(1, 2).reshape(n * length, heads, -1))
        order.append(idx)
    flat, idx = torch.cat(outs), torch.cat(order)
    if idx.numel() == batch * tokens:  # every token in a segment: undo the grouping
        inverse = torch.empty_like(idx)
        inverse[idx] = torch.arange(idx.numel(), device=idx.device)
        flat = flat.index_select(0, inverse)
    else:  # padding tokens attend to nothing
        flat = flat.new_zeros(batch * tokens, heads, flat.shape[-1]).index_copy(0, idx, flat)
    return flat.view(batch, tokens, heads, -1), None


def register_segment_attention() -> str:
    """Register :func:`segment_attention_forward` with transformers; returns its name.

    Example:
        >>> register_segment_attention()
        'ctxkit_segments'
    """
    from ctxkit.training.varlen import register_attention

    return register_attention(SEGMENT_ATTENTION, segment_attention_forward)
