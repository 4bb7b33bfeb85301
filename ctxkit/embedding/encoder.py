"""Packed embedding passes: ``PackedEncoder``, the vectors of ``SentenceTransformer.encode``.

Short documents are packed into rows instead of being padded to the longest text of their
batch. Every document keeps its own ``[CLS] ... [SEP]``, ``position_ids`` restart at 0 for
each one, attention is block-diagonal (no document sees another), and pooling runs per
document, so every vector matches ``SentenceTransformer.encode`` to fp32 rounding.

How a call runs:

1. Texts are tokenised with the model's own tokenizer, truncated to ``max_seq_length``
   exactly as sentence-transformers does. Empty texts become ``[CLS] [SEP]`` as there;
   over-long texts are truncated and counted in ``last_stats``.
2. :func:`choose_rows` packs the token lengths into rows (best-fit decreasing) of
   ``max_seq_length``, or shorter when its cost model says that is cheaper.
3. Rows are grouped into forward passes of about ``batch_tokens`` token slots.
4. The model's encoder runs on the flat tokens (:mod:`ctxkit.embedding.model`): SDPA with a
   block-diagonal mask, or flash-attention's varlen kernel on padding-free tokens on a GPU
   with flash-attn. Pooling runs per segment, then the model's modules after pooling
   (``Dense``, ``Normalize``).

Design notes and measurements (why token-sized forwards, the row-length cost model, the
attention kernels tried): ``docs/embedding.md``.

Example:
    >>> enc = PackedEncoder(device="cpu")
    >>> vecs = enc.encode(["a packed pass", "", "another text"])
    >>> vecs.shape
    (3, 384)
    >>> enc.last_stats.texts, enc.last_stats.empty
    (3, 1)
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ctxkit import validate
from ctxkit.embedding.model import (
    Backbone,
    PackedModel,
    block_attention,
    flash_varlen_fn,
    load_backbone,
    varlen_attention,
)
from ctxkit.embedding.ops import RowBatch, additive_mask, build_batch, pool_segments, varlen_inputs
from ctxkit.embedding.options import EmbedOptions
from ctxkit.packing.plan import pack_lengths

__all__ = ["EncodeStats", "PackedEncoder", "PackedPasses", "Tokenized", "choose_rows",
           "tokenize_texts"]

# Weight of masked-attention FLOPs against linear-layer FLOPs in the row-length cost model:
# 1.0 counts FLOPs as they are. On chat-length texts it picks rows of 128 (attention 6% of
# the linear FLOPs instead of 11% at 256, for 2% more padding); on instruction-length texts
# it keeps rows of max_seq_length. The CPU timings of the two lie within their own spread, so
# the weight stays at the FLOP count; the embedding benchmark (python -m evals.embedding)
# reports both, see docs/embedding.md ("Row length").
ATTN_WEIGHT = 1.0
_D = EmbedOptions()  # the defaults of every keyword below come from here


@dataclass
class EncodeStats:
    """What an ``encode`` call did (accumulates across chunks)."""

    texts: int = 0
    tokens: int = 0  # real tokens after truncation, [CLS]/[SEP] included
    slots: int = 0  # row slots computed (tokens + padding)
    rows: int = 0
    forwards: int = 0
    empty: int = 0  # empty or whitespace-only texts (embedded as "[CLS] [SEP]", like ST)
    truncated: int = 0  # texts cut to max_seq_length
    seconds: float = 0.0

    @property
    def utilization(self) -> float:
        return self.tokens / self.slots if self.slots else 0.0

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.seconds if self.seconds > 0 else 0.0

    def add(self, other: EncodeStats) -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "utilization": self.utilization, "texts_per_s": self.texts_per_s}


@dataclass
class Tokenized:
    """Token ids of a chunk, flat: text ``i`` is ``ids[offsets[i]:offsets[i] + lengths[i]]``."""

    ids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    empty: int
    truncated: int
    types: np.ndarray | None = None  # token types aligned with ids (pairs), else None


def tokenize_texts(tokenizer: Any, texts: Sequence[str], max_len: int,
                   second: Sequence[str] | None = None, token_types: bool = False) -> Tokenized:
    """Token ids as the model's tokenizer makes them, flat: special tokens, and truncation to
    ``max_len`` with ``"longest_first"`` (what sentence-transformers and ``CrossEncoder`` ask
    for). ``second`` makes pairs ``(texts[i], second[i])`` encoded as the tokenizer encodes
    pairs; ``token_types`` keeps their token type ids.

    Example:
        >>> from ctxkit.io.tokenizers import get_tokenizer
        >>> tok = get_tokenizer("minilm").backend
        >>> tk = tokenize_texts(tok, ["a b"], 8, second=["c"], token_types=True)
        >>> tk.lengths.tolist(), tk.types.tolist()
        ([6], [0, 0, 0, 0, 1, 1])
    """
    args = [list(texts)] + ([list(second)] if second is not None else [])
    kw = {"truncation": "longest_first", "return_attention_mask": False,
          "return_token_type_ids": token_types}
    enc = tokenizer(*args, max_length=max_len, **kw) if texts else {"input_ids": []}
    ids = enc["input_ids"]
    lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    # An input at exactly max_len may have been cut: one more token of room tells.
    full = np.flatnonzero(lengths == max_len)
    truncated = 0
    if len(full):
        longer = tokenizer(*([a[i] for i in full] for a in args), max_length=max_len + 1,
                           **kw)["input_ids"]
        truncated = sum(len(x) > max_len for x in longer)
    total = int(lengths.sum())
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64, total)
    types = np.fromiter(itertools.chain.from_iterable(enc["token_type_ids"]), np.int64, total) \
        if token_types and texts else None
    offsets = np.cumsum(lengths) - lengths
    empty = sum(1 for parts in zip(*args) if not any(t.strip() for t in parts))
    return Tokenized(flat, offsets, lengths, empty, int(truncated), types)


def choose_rows(lengths: np.ndarray, max_len: int, hidden: int, row_length: int | str = "auto",
                attn_weight: float = ATTN_WEIGHT) -> list[tuple[int, list[np.ndarray]]]:
    """Pack ``lengths`` into rows; returns ``[(capacity, bins)]`` (bins index ``lengths``).

    ``row_length="auto"`` tries capacities ``max_len``, ..., 64, 32; texts longer than the
    capacity go into rows of ``max_len``. The plan with the least modelled cost
    ``slots + attn_weight * sum(C**2) / (6 * hidden)`` wins, ties going to longer rows.

    Example:
        >>> [(c, len(b)) for c, b in choose_rows(np.array([10, 12, 9, 11]), 256, 384)]
        [(32, 2)]
        >>> [(c, len(b)) for c, b in choose_rows(np.array([10, 12, 9, 11]), 256, 384,
        ...                                      attn_weight=0.0)]
        [(64, 1)]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if row_length == "auto":
        caps = [c for c in (32, 64, 128, 256, 512, 1024, 2048) if c < max_len] + [max_len]
    else:
        caps = [int(row_length)]
        if caps[0] <= 0:
            raise ValueError(f"row_length must be positive, got {row_length!r}")
    best: tuple[float, list] | None = None
    for cap in sorted(caps, reverse=True):  # ties go to the longest rows (fewest rows)
        groups = []
        small = np.flatnonzero(lengths <= cap)
        big = np.flatnonzero(lengths > cap)
        for c, idx in ((cap, small), (max_len, big)):
            if len(idx):
                plan = pack_lengths(lengths[idx], capacity=c, strategy="bfd")
                groups.append((c, [idx[b] for b in plan.bins]))
        cost = sum(len(b) * (c + attn_weight * c * c / (6 * hidden)) for c, b in groups)
        if best is None or cost < best[0]:
            best = (cost, groups)
    return best[1] if best else []


class PackedPasses:
    """The machinery every packed model shares: options, rows, forwards, the chunk loop.

    A subclass sets ``self.packed`` (a :class:`~ctxkit.embedding.model.PackedModel`) through
    :meth:`_configure` and supplies what happens to the token states of each batch (pooling
    and the modules after it for embeddings, a classification head for classifiers).
    """

    packed: PackedModel

    def _configure(self, packed: PackedModel, opts: EmbedOptions) -> None:
        self.options = opts
        self.packed = packed
        self.device = packed.device
        self.dtype = packed.dtype
        on_gpu = self.device.type == "cuda"
        # CPU: 8192 slots ran slower than 4096 (docs/embedding.md, "Token-sized forwards")
        self.batch_tokens = opts.batch_tokens or (65536 if on_gpu else 4096)
        self.row_length = opts.row_length
        self._flash = flash_varlen_fn() if on_gpu else None
        attention = opts.attention
        if attention == "auto":
            attention = "varlen" if self._flash is not None else "block"
        if attention == "varlen" and packed.kind != "fused":
            raise ValueError("attention='varlen' needs a BERT-family model (the fused forward)")
        self.attention = attention
        self.overlap = on_gpu if opts.overlap is None else opts.overlap
        self.last_stats: EncodeStats | None = None

    @property
    def max_seq_length(self) -> int:
        return self.packed.max_seq_length

    def _batches(self, tk: Tokenized, batch_tokens: int) -> Iterator[RowBatch]:
        hidden = self.packed.fused.hidden if self.packed.fused else self.packed.hidden
        for cap, bins in choose_rows(tk.lengths, self.max_seq_length, hidden, self.row_length):
            per = max(1, batch_tokens // cap)
            for s in range(0, len(bins), per):
                yield build_batch(tk.ids, tk.offsets, tk.lengths, bins[s:s + per], cap,
                                  self.packed.pad_id, tk.types)

    def _to_device(self, arr: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(arr)
        if self.device.type == "cuda":  # pinned host memory: asynchronous copy to the GPU
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def _forward(self, b: RowBatch) -> torch.Tensor:
        """Token vectors for every slot of the batch ``[slots, hidden]`` (padding included)."""
        bb = self.packed
        ids, pos, seg = (self._to_device(a) for a in (b.input_ids, b.position_ids, b.segment_ids))
        types = None if b.token_type_ids is None else self._to_device(b.token_type_ids)
        if bb.kind == "fused" and self.attention == "varlen":
            keep = seg >= 0  # padding-free: only real tokens reach the encoder
            cu, mx = varlen_inputs(b.lengths)
            attend = varlen_attention(cu.to(self.device), mx, self._flash)
            out = torch.zeros(b.n_slots, bb.fused.hidden, dtype=self.dtype, device=self.device)
            out[keep] = bb.fused.forward(ids[keep], pos[keep], attend,
                                         None if types is None else types[keep])
            return out
        if bb.kind == "fused":
            mask = additive_mask(seg, b.rows, b.capacity, self.dtype)
            attend = block_attention(mask, b.rows, b.capacity)
            return bb.fused.forward(ids, pos, attend, types)
        hf = bb.encoder
        shape = (b.rows, b.capacity)
        mask = additive_mask(seg, b.rows, b.capacity, next(hf.parameters()).dtype)
        extra = {}
        if bb.token_types:  # explicit, never a model's own default buffer
            extra["token_type_ids"] = (types if types is not None
                                       else torch.zeros_like(ids)).view(shape)
        out = hf(input_ids=ids.view(shape), attention_mask=mask,
                 position_ids=(pos + bb.position_offset).view(shape), **extra)
        return out.last_hidden_state.reshape(b.n_slots, -1)

    def _run(self, items: list, tokenize: Callable[[list], Tokenized],
             head: Callable[[RowBatch, torch.Tensor], torch.Tensor], width: int,
             batch_tokens: int | None, progress: bool | Callable[[int], Any],
             desc: str) -> np.ndarray:
        """``head``'s rows ``[len(items), width]`` in input order, ``chunk_size`` items at a
        time (the next chunk tokenised while this one computes when ``overlap``); the call's
        figures go to ``self.last_stats``."""
        batch_tokens = self.batch_tokens if batch_tokens is None else batch_tokens
        if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or \
                batch_tokens <= 0:
            raise ValueError(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
        chunk = self.options.chunk_size
        stats = EncodeStats()
        t0 = time.perf_counter()
        out = np.empty((len(items), width), dtype=np.float32)
        bar = None
        if progress is True:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(items), unit="text", desc=desc)
        starts = list(range(0, len(items), chunk))
        pool = concurrent.futures.ThreadPoolExecutor(1) if self.overlap and len(starts) > 1 \
            else None
        try:
            def tokenize_chunk(s: int) -> Tokenized:
                return tokenize(items[s:s + chunk])

            nxt = pool.submit(tokenize_chunk, starts[0]) if pool and starts else None
            for n, s in enumerate(starts):
                if pool:
                    tk = nxt.result()
                    if n + 1 < len(starts):
                        nxt = pool.submit(tokenize_chunk, starts[n + 1])
                else:
                    tk = tokenize_chunk(s)
                part = self._compute(tk, batch_tokens, head, width, stats)
                out[s:s + len(part)] = part
                if bar is not None:
                    bar.update(len(part))
                elif callable(progress):
                    progress(s + len(part))
        finally:
            if pool:
                pool.shutdown(wait=True, cancel_futures=True)
            if bar is not None:
                bar.close()
        stats.seconds = time.perf_counter() - t0
        self.last_stats = stats
        return out

    def _compute(self, tk: Tokenized, batch_tokens: int,
                 head: Callable[[RowBatch, torch.Tensor], torch.Tensor], width: int,
                 stats: EncodeStats, batches: Iterator[RowBatch] | None = None) -> np.ndarray:
        """``head`` on every batch of tokenised items; ``batches`` overrides the layout (the
        benchmarks use it to run padded layouts through the same forward)."""
        n = len(tk.lengths)
        out = torch.empty((n, width), dtype=torch.float32)
        with torch.inference_mode():
            for b in batches if batches is not None else self._batches(tk, batch_tokens):
                out[torch.from_numpy(b.docs)] = head(b, self._forward(b)).float().cpu()
                stats.rows += b.rows
                stats.slots += b.n_tokens if self.attention == "varlen" else b.n_slots
                stats.forwards += 1
        stats.texts += n
        stats.tokens += int(tk.lengths.sum())
        stats.empty += tk.empty
        stats.truncated += tk.truncated
        return out.numpy()


class PackedEncoder(PackedPasses):
    """Sentence embeddings with packed rows; same vectors as ``SentenceTransformer.encode``
    in float32 (on a CPU, or ``dtype="float32"``); in bf16/fp16 (``"auto"`` on a GPU) a cosine
    of about 0.9999 to them.

    ``model``: None (bundled all-MiniLM-L6-v2, offline), a local sentence-transformers
    directory, or a loaded ``SentenceTransformer``. ``device``: "auto" (CUDA if present),
    "cpu", "cuda", ... ``dtype``: "auto" (fp32 on CPU, bf16/fp16 on GPU) or a dtype name.
    ``batch_tokens``: token slots per forward (default 4096 on CPU, 65536 on GPU).
    ``row_length``: "auto" or a fixed row length.
    ``attention``: "auto", "block" (SDPA with a block-diagonal mask over rows) or "varlen"
    (padding-free tokens with ``cu_seqlens``: flash-attn on GPU, a reference loop elsewhere).
    ``overlap``: tokenise the next chunk while the current one computes (default: on GPU
    only; on a CPU it competes with the forward for cores). ``chunk_size``: texts tokenised
    and packed together.
    ``normalize``: the default of :meth:`encode`'s ``normalize``. All of them may come as one
    :class:`~ctxkit.embedding.options.EmbedOptions` (``options``), kept as ``self.options``.

    Example:
        >>> enc = PackedEncoder(device="cpu")
        >>> enc.encode(["hello world"]).shape
        (1, 384)
    """

    def __init__(self, model: Any = _D.model, *, options: EmbedOptions | None = None,
                 device: str = _D.device, dtype: str = _D.dtype,
                 batch_tokens: int | None = _D.batch_tokens,
                 row_length: int | str = _D.row_length, attention: str = _D.attention,
                 overlap: bool | None = _D.overlap, chunk_size: int = _D.chunk_size,
                 normalize: bool | None = _D.normalize) -> None:
        opts = EmbedOptions.resolve(
            options, model=model, device=device, dtype=dtype, batch_tokens=batch_tokens,
            row_length=row_length, attention=attention, overlap=overlap, chunk_size=chunk_size,
            normalize=normalize)
        self.backbone: Backbone = load_backbone(opts.model, opts.device, opts.dtype)
        self._configure(self.backbone, opts)

    @property
    def max_seq_length(self) -> int:  # live: a user may change the model's max_seq_length
        return int(self.backbone.model.max_seq_length)

    @property
    def dim(self) -> int:
        return self.backbone.dim

    def tokenize(self, texts: Sequence[str]) -> Tokenized:
        """Token ids as sentence-transformers makes them (special tokens, truncation)."""
        texts = validate.texts(texts, "texts")
        return tokenize_texts(self.backbone.tokenizer, texts, self.max_seq_length)

    def _pool(self, b: RowBatch, hidden: torch.Tensor, normalize: bool | None) -> torch.Tensor:
        bb = self.backbone
        dev = hidden.device
        seg = torch.from_numpy(b.segment_ids).to(dev)
        pos = torch.from_numpy(b.position_ids).to(dev)
        starts = torch.from_numpy(b.starts).to(dev)
        lens = torch.from_numpy(b.lengths).to(dev)
        emb = pool_segments(hidden, seg, pos, starts, lens, bb.pooling)
        for module in bb.post_modules:
            if type(module).__name__ == "Normalize":
                continue  # applied below, so normalize=False can switch it off
            emb = module({"sentence_embedding": emb.to(self.dtype)})["sentence_embedding"].float()
        if normalize if normalize is not None else bb.normalizes:
            emb = F.normalize(emb, p=2, dim=-1)
        return emb

    def encode(self, texts: Sequence[str], *, batch_tokens: int | None = None,
               normalize: bool | None = None, progress: bool | Callable[[int], Any] = False,
               ) -> np.ndarray:
        """Embed ``texts``; returns float32 ``[len(texts), dim]`` in input order.

        ``batch_tokens``: token slots per forward (default ``self.batch_tokens``).
        ``normalize``: None takes the encoder's ``options.normalize`` (None: follow the
        model's ``Normalize`` module); True/False forces it.
        ``progress``: True shows a tqdm bar; a callable is called with the number of texts
        done after each chunk. Statistics of the call are left in ``self.last_stats``.

        Example:
            >>> PackedEncoder(device="cpu").encode(["one", "two"], normalize=False).shape
            (2, 384)
        """
        texts = validate.texts(texts, "texts")  # one str is an error: wrap it in a list
        if normalize is None:
            normalize = self.options.normalize
        return self._run(list(texts), self.tokenize,
                         lambda b, hidden: self._pool(b, hidden, normalize), self.dim,
                         batch_tokens, progress, "embed")

    def _encode_tokenized(self, tk: Tokenized, batch_tokens: int, normalize: bool | None,
                          stats: EncodeStats,
                          batches: Iterator[RowBatch] | None = None) -> np.ndarray:
        """Embed tokenised texts; ``batches`` overrides the layout (the benchmark uses it to
        run padded layouts through the same forward)."""
        return self._compute(tk, batch_tokens, lambda b, h: self._pool(b, h, normalize),
                             self.dim, stats, batches)
