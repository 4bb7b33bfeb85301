"""Torch's varlen attention as a transformers attention implementation (GPU).

``torch.nn.attention.varlen.varlen_attn`` runs FlashAttention over sequences given by their
boundaries (``cu_seqlens``), the way flash-attn's ``flash_attn_varlen_func`` does, without the
flash-attn package. :func:`register_varlen_attention` registers it with transformers under the
name :data:`VARLEN_ATTENTION`, so a model loaded with
``attn_implementation="ctxkit_varlen"`` (or ``model.set_attn_implementation(...)``) attends
within the packed segments of a flat batch: from the batch's ``cu_seq_lens_q`` when given, else
from where ``position_ids`` restart. The kernel needs CUDA; on a CPU,
:mod:`ctxkit.training.segment_attention` attends per segment with torch's SDPA.

Example:
    >>> import torch
    >>> cu_seqlens_from_positions(torch.tensor([[0, 1, 2, 0, 1, 0]])).tolist()
    [0, 3, 5, 6]
"""

from __future__ import annotations

from typing import Any

__all__ = ["VARLEN_ATTENTION", "cu_seqlens_from_positions", "register_varlen_attention",
           "varlen_attention_forward"]

VARLEN_ATTENTION = "ctxkit_varlen"


def cu_seqlens_from_positions(position_ids: Any) -> Any:
    """Segment boundaries (int32, ``[0, ..., tokens]``) over the flattened ``position_ids``: a
    segment starts wherever a position is not the previous one plus 1, and at every row start.

    Example:
        >>> import torch
        >>> cu_seqlens_from_positions(torch.tensor([[0, 1, 0], [0, 1, 2]])).tolist()
        [0, 2, 3, 6]
    """
    import torch

    pos = position_ids.reshape(position_ids.shape[0], -1) if position_ids.ndim > 1 \
        else position_ids[None]
    starts = torch.ones(pos.shape, dtype=torch.bool, device=pos.device)
    starts[:, 1:] = torch.diff(pos, dim=-1) != 1
    idx = torch.nonzero(starts.reshape(-1)).reshape(-1)
    total = torch.tensor([pos.numel()], device=pos.device)
    return torch.cat([idx, total]).to(torch.int32)


def varlen_attention_forward(module: Any, query: Any, key: Any, value: Any,
                             attention_mask: Any, dropout: float = 0.0,
                             scaling: float | None = None, sliding_window: int | None = None,
                             softcap: float | None = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention interface over ``varlen_attn``: ``query`` ``[batch, heads,
    tokens, dim]`` in, ``[batch, tokens, heads, dim]`` out, causal within each segment."""
    import torch
    from torch.nn.attention.varlen import varlen_attn

    if softcap is not None or dropout:
        raise NotImplementedError(f"{VARLEN_ATTENTION} has no logit softcapping or attention "
                                  "dropout; use flash_attention_2 or eager for this model")
    batch, heads, tokens, dim = query.shape
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        cu = cu_seqlens_from_positions(kwargs["position_ids"])
    cu = cu.to(device=query.device, dtype=torch.int32)
    longest = kwargs.get("max_length_q") or int((cu[1:] - cu[:-1]).max())
    q = query.transpose(1, 2).reshape(batch * tokens, heads, dim)
    k = key.transpose(1, 2).reshape(batch * tokens, key.shape[1], dim)
    v = value.transpose(1, 2).reshape(batch * tokens, value.shape[1], dim)
    window = (sliding_window - 1, 0) if sliding_window else (-1, 0)
    out = varlen_attn(q, k, v, cu, cu, longest, longest, scale=scaling,
                      window_size=window, enable_gqa=key.shape[1] != heads)
    return out.reshape(batch, tokens, heads, dim), None


def register_varlen_attention() -> str:
    """Register :func:`varlen_attention_forward` with transformers; returns its name.

    Example:
        >>> register_varlen_attention()
        'ctxkit_varlen'
    """
    return register_attention(VARLEN_ATTENTION, varlen_attention_forward)


def register_attention(name: str, forward: Any) -> str:
    """Register ``forward`` as transformers attention implementation ``name``, with the
    flash-attention mask function (no 4-D mask is built: the segments come from
    ``position_ids`` or ``cu_seq_lens_*``); returns ``name``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(name, forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
    return name
