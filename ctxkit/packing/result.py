"""The result of packing: token arrays, where every token came from, what packing achieved.

:class:`PackResult` holds a packed batch in one of two layouts (``"padded"`` ``[rows,
capacity]`` or padding-free ``"flat"`` ``[1, T]``) and derives from it what a model takes: the
block-diagonal attention mask, the flash-attention varlen boundaries and the keys of
transformers' ``DataCollatorWithFlattening``. :func:`ctxkit.pack` builds it.

Example:
    >>> from ctxkit import pack
    >>> batch = pack([[5, 6, 7], [8, 9]], capacity=4)
    >>> batch.segment_ids.tolist(), batch.utilization
    ([[1, 1, 1, 0], [1, 1, 0, 0]], 0.625)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["IGNORE_INDEX", "PackResult"]

IGNORE_INDEX = -100  # what torch's cross entropy and transformers skip

_EMPTY = np.zeros(0, np.int64)


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
            >>> from ctxkit import pack
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
