"""Tensor pieces of packed embedding passes: layouts, masks, attention and per-segment pooling.

These are the parts of :mod:`ctxkit.embedding.encoder` that work on one batch of packed rows.
They take plain arrays and tensors, so each one is tested on CPU, including the code the GPU
path runs (half-precision masks, flash-attention varlen inputs).

A batch is a set of rows of ``capacity`` token slots. Each row holds whole documents, each
with its own ``[CLS] ... [SEP]``; ``segment_ids`` number the documents of the batch from 0 in
row order and are -1 on padding; ``position_ids`` restart at 0 for every document.

Example:
    >>> import numpy as np
    >>> flat = np.array([101, 7, 102, 101, 8, 9, 102])
    >>> b = build_batch(flat, np.array([0, 3]), np.array([3, 4]), [np.array([0, 1])], 8)
    >>> b.segment_ids.tolist()
    [0, 0, 0, 1, 1, 1, 1, -1]
    >>> b.position_ids.tolist()
    [0, 1, 2, 0, 1, 2, 3, 0]
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "POOLING_MODES",
    "RowBatch",
    "additive_mask",
    "block_mask",
    "build_batch",
    "pool_segments",
    "varlen_attention_reference",
    "varlen_inputs",
]

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")


@dataclass
class RowBatch:
    """One forward pass worth of packed rows (flat, row-major ``rows * capacity`` slots)."""

    input_ids: np.ndarray  # [rows * capacity] int64, pad id on padding
    position_ids: np.ndarray  # [rows * capacity] int64, restarting per document, 0 on padding
    segment_ids: np.ndarray  # [rows * capacity] int64, document number in the batch, -1 padding
    docs: np.ndarray  # [k] input index of each document, in segment order
    lengths: np.ndarray  # [k] tokens of each document
    starts: np.ndarray  # [k] flat slot of each document's first token
    rows: int
    capacity: int
    token_type_ids: np.ndarray | None = None  # [rows * capacity] int64 (pairs), 0 on padding

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def n_slots(self) -> int:
        return self.rows * self.capacity


def build_batch(
    flat_ids: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    bins: Sequence[np.ndarray],
    capacity: int,
    pad_id: int = 0,
    flat_types: np.ndarray | None = None,
) -> RowBatch:
    """Lay the documents of ``bins`` (one index array per row) into rows of ``capacity``.

    ``flat_ids[offsets[i]:offsets[i] + lengths[i]]`` are the token ids of document ``i``;
    ``flat_types``, aligned with ``flat_ids``, their token types (the two texts of a pair),
    laid out the same way. Vectorised: no Python loop over tokens or documents.
    """
    sizes = np.fromiter((len(b) for b in bins), np.int64, len(bins))
    docs = np.concatenate(bins).astype(np.int64) if len(bins) else np.zeros(0, np.int64)
    lens = lengths[docs].astype(np.int64)
    if np.any(lens <= 0):
        raise ValueError("every packed document needs at least one token")
    rows = len(bins)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), sizes)
    # Offset of each document inside its row: cumulative length, restarted at each row.
    csum = np.cumsum(lens) - lens
    first_doc_of_row = np.cumsum(sizes) - sizes
    row_base = np.repeat(csum[first_doc_of_row] if rows else csum[:0], sizes)
    in_row = csum - row_base
    if np.any(in_row + lens > capacity):
        raise ValueError(f"a row holds more than capacity={capacity} tokens")
    starts = row_of * capacity + in_row
    total = int(lens.sum())
    # Token k of the batch belongs to document j; its position inside j is k - csum[j].
    doc_of_tok = np.repeat(np.arange(len(docs), dtype=np.int64), lens)
    pos = np.arange(total, dtype=np.int64) - csum[doc_of_tok]
    src = offsets[docs].astype(np.int64)[doc_of_tok] + pos
    dest = starts[doc_of_tok] + pos
    n = rows * capacity
    input_ids = np.full(n, pad_id, np.int64)
    position_ids = np.zeros(n, np.int64)
    segment_ids = np.full(n, -1, np.int64)
    input_ids[dest] = flat_ids[src]
    position_ids[dest] = pos
    segment_ids[dest] = doc_of_tok
    types = None
    if flat_types is not None:
        types = np.zeros(n, np.int64)
        types[dest] = flat_types[src]
    return RowBatch(input_ids, position_ids, segment_ids, docs, lens, starts, rows, capacity,
                    types)


def block_mask(segment_ids: torch.Tensor, rows: int, capacity: int) -> torch.Tensor:
    """Boolean block-diagonal mask ``[rows, 1, capacity, capacity]`` (True = may attend).

    Padding (-1) attends only to the padding of its own row, so no query row is fully masked
    (a fully masked row gives NaN in softmax); padding outputs are never pooled.
    """
    seg = segment_ids.view(rows, capacity)
    return (seg.unsqueeze(2) == seg.unsqueeze(1)).unsqueeze(1)


def additive_mask(segment_ids: torch.Tensor, rows: int, capacity: int,
                  dtype: torch.dtype) -> torch.Tensor:
    """The block-diagonal mask as an additive float mask (0 / ``finfo(dtype).min``).

    The eager attention of transformers' BERT silently misreads boolean 4D masks; an additive
    mask in the model's own dtype is right on every attention path.
    """
    allowed = block_mask(segment_ids, rows, capacity)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)


def varlen_inputs(lengths: np.ndarray) -> tuple[torch.Tensor, int]:
    """``cu_seqlens`` (int32, ``[k + 1]``) and ``max_seqlen`` for flash-attention varlen kernels.

    Example:
        >>> cu, mx = varlen_inputs(np.array([3, 5, 2]))
        >>> cu.tolist(), mx
        ([0, 3, 8, 10], 5)
    """
    cu = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=cu[1:])
    return torch.from_numpy(cu), int(lengths.max()) if len(lengths) else 0


def varlen_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               cu_seqlens: torch.Tensor, max_seqlen: int) -> torch.Tensor:
    """What ``flash_attn_varlen_func`` computes, in plain PyTorch (``[T, heads, head_dim]``).

    Used where flash-attn is absent and in tests, so the varlen layout the GPU path feeds to
    the kernel is checked on CPU.
    """
    out = torch.empty_like(q)
    bounds = cu_seqlens.tolist()
    for s, e in itertools.pairwise(bounds):
        if e - s > max_seqlen:
            raise ValueError("a segment is longer than max_seqlen")
        qs, ks, vs = (t[s:e].transpose(0, 1) for t in (q, k, v))
        out[s:e] = F.scaled_dot_product_attention(qs, ks, vs).transpose(0, 1)
    return out


def pool_segments(
    hidden: torch.Tensor,
    segment_ids: torch.Tensor,
    position_ids: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    modes: Sequence[str],
) -> torch.Tensor:
    """Pool token vectors ``hidden [slots, dim]`` per segment; modes are concatenated like
    sentence-transformers' ``Pooling`` does. Accumulates in fp32 even for half-precision input.
    """
    k = int(lengths.numel())
    dim = hidden.shape[-1]
    valid = segment_ids >= 0
    seg = segment_ids[valid]
    tok = hidden[valid].float()
    n = lengths.to(torch.float32).unsqueeze(1)
    outputs = []
    sums = None
    for mode in modes:
        if mode == "cls":
            outputs.append(hidden[starts].float())
        elif mode == "lasttoken":
            outputs.append(hidden[starts + lengths - 1].float())
        elif mode == "max":
            init = torch.full((k, dim), float("-inf"), dtype=torch.float32, device=hidden.device)
            index = seg.unsqueeze(1).expand(-1, dim)
            outputs.append(init.scatter_reduce_(0, index, tok, "amax"))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            if sums is None:
                sums = torch.zeros(k, dim, dtype=torch.float32, device=hidden.device)
                sums.index_add_(0, seg, tok)
            outputs.append(sums / (n if mode == "mean" else n.sqrt()))
        elif mode == "weightedmean":
            w = (position_ids[valid] + 1).to(torch.float32)
            num = torch.zeros(k, dim, dtype=torch.float32, device=hidden.device)
            num.index_add_(0, seg, tok * w.unsqueeze(1))
            den = torch.zeros(k, dtype=torch.float32, device=hidden.device).index_add_(0, seg, w)
            outputs.append(num / den.unsqueeze(1))
        else:
            raise ValueError(f"unknown pooling mode {mode!r}; known: {POOLING_MODES}")
    return torch.cat(outputs, dim=-1)
