"""Loading a sentence-transformers model for packed passes, and the packed BERT forward.

:func:`load_backbone` turns a model directory (default: the bundled all-MiniLM-L6-v2) or a
loaded ``SentenceTransformer`` into a :class:`Backbone`: its tokenizer, ``max_seq_length``,
pooling modes, the modules after pooling (``Normalize``, ``Dense``) and the encoder weights,
fused for packed passes. Loading is cached per (path, device, dtype), so constructing many
``PackedEncoder()`` objects is free after the first.

Two forwards honour document boundaries inside packed rows:

- ``"fused"`` (BERT-family encoders with absolute positions): our own forward over the
  model's weights on flat tokens. Q, K and V are one matrix multiply; attention is SDPA over
  rows with a block-diagonal mask, or flash-attention's varlen kernel over padding-free tokens
  with ``cu_seqlens`` when flash-attn and a GPU are present.
- ``"hf"`` (any other absolute-position encoder transformers runs): the model's own forward
  with a 4D additive mask and restarting ``position_ids``.

:func:`packed_encoder` does the part that is not about sentence-transformers (which encoders
pack, which forward, position offset, token types), so the classification heads of
:mod:`ctxkit.embedding.classifier` run on the same forwards.

Example:
    >>> bb = load_backbone(None, "cpu", "auto")
    >>> bb.max_seq_length, bb.pooling, bb.dim
    (256, ('mean',), 384)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ctxkit.embedding.ops import POOLING_MODES, varlen_attention_reference
from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = ["Backbone", "PackedModel", "flash_varlen_fn", "load_backbone", "native_bf16_cpu",
           "packed_encoder", "resolve_device", "resolve_dtype"]

# model_type -> offset added to restarting position ids (RoBERTa counts from padding_idx + 1)
_HF_PACKABLE = {"bert": 0, "roberta": None, "xlm-roberta": None, "camembert": None, "electra": 0,
                "distilbert": 0}


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` is CUDA when available, else CPU; a device this machine lacks is a
    ``ValueError`` (before any model is loaded)."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} needs CUDA, which this machine does not have; "
                         "use cpu or auto")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: this machine has {torch.cuda.device_count()} "
                         "CUDA device(s)")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r} is not supported; use auto, cpu, cuda or cuda:N")
    return dev


def native_bf16_cpu() -> bool:
    """True when this CPU multiplies bf16 in hardware (x86 AVX512-BF16 or AMX tiles), where
    oneDNN's bf16 forward is several times faster than fp32 (``python -m evals.embedding``,
    its ``dtype="fast"`` row); elsewhere bf16 is emulated."""
    import torch.cpu

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"``: bf16 on GPUs that support it, else fp16 on GPU; fp32 on CPU (exactness).
    ``"fast"``: as ``"auto"`` on GPU; on CPU bf16 where the CPU multiplies it natively
    (:func:`native_bf16_cpu`), else fp32: for rankings, where bf16 vectors stay at a cosine
    above 0.9999 to fp32's and the forward is the cost.

    Example:
        >>> resolve_dtype("auto", torch.device("cpu"))
        torch.float32
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
             "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype in ("auto", "fast"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if dtype == "fast" and device.type == "cpu" and native_bf16_cpu():
            return torch.bfloat16
        return torch.float32
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use 'auto', 'fast' or one of {sorted(names)}")
    return names[dtype]


def flash_varlen_fn() -> Callable | None:
    """flash-attn's ``flash_attn_varlen_func`` when installed (GPU machines), else None."""
    try:
        from flash_attn import flash_attn_varlen_func
    except (ImportError, OSError, RuntimeError):  # absent or built for another CUDA: SDPA
        return None
    return flash_attn_varlen_func


@dataclass
class FusedBert:
    """BERT encoder weights laid out for the packed forward (QKV fused into one matmul)."""

    word: torch.Tensor
    position: torch.Tensor
    token_type: torch.Tensor  # [type_vocab_size, hidden]
    emb_ln: tuple[torch.Tensor, torch.Tensor]
    layers: list[tuple[torch.Tensor, ...]]
    heads: int
    eps: float
    act: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)

    @classmethod
    def from_model(cls, bert: Any, device: torch.device, dtype: torch.dtype) -> FusedBert:
        from transformers.activations import ACT2FN

        sd = {k: v.detach().to(device=device, dtype=dtype) for k, v in bert.state_dict().items()
              if v.is_floating_point()}
        cfg = bert.config
        layers = []
        for i in range(cfg.num_hidden_layers):
            def g(name: str, i: int = i) -> torch.Tensor:
                return sd[f"encoder.layer.{i}.{name}"]
            att = "attention.self."
            wqkv = torch.cat([g(att + "query.weight"), g(att + "key.weight"),
                              g(att + "value.weight")]).contiguous()
            bqkv = torch.cat([g(att + "query.bias"), g(att + "key.bias"), g(att + "value.bias")])
            # Weights stored transposed ([in, out]) for addmm: ~10% faster GEMMs on CPU here.
            layers.append((
                wqkv.t().contiguous(), bqkv,
                g("attention.output.dense.weight").t().contiguous(),
                g("attention.output.dense.bias"),
                g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias"),
                g("intermediate.dense.weight").t().contiguous(), g("intermediate.dense.bias"),
                g("output.dense.weight").t().contiguous(), g("output.dense.bias"),
                g("output.LayerNorm.weight"), g("output.LayerNorm.bias"),
            ))
        return cls(
            word=sd["embeddings.word_embeddings.weight"],
            position=sd["embeddings.position_embeddings.weight"],
            token_type=sd["embeddings.token_type_embeddings.weight"],
            emb_ln=(sd["embeddings.LayerNorm.weight"], sd["embeddings.LayerNorm.bias"]),
            layers=layers, heads=cfg.num_attention_heads, eps=cfg.layer_norm_eps,
            act=ACT2FN[cfg.hidden_act],
        )

    @property
    def hidden(self) -> int:
        return self.word.shape[1]

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attend: Callable[[torch.Tensor], torch.Tensor],
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token vectors ``[T, hidden]`` for flat ``input_ids``/``position_ids`` ``[T]``.

        ``attend`` maps the fused projections ``[T, 3, heads, head_dim]`` to the attention
        output ``[T, hidden]``; it alone decides which tokens see each other.
        ``token_type_ids`` (``[T]``, e.g. the two sides of a cross-encoder pair): None is type 0.
        """
        h, eps = self.hidden, self.eps
        x = F.embedding(input_ids, self.word) + F.embedding(position_ids, self.position)
        types = self.token_type[0] if token_type_ids is None else \
            F.embedding(token_type_ids, self.token_type)
        x = F.layer_norm(x + types, (h,), *self.emb_ln, eps)
        shape = (x.shape[0], 3, self.heads, h // self.heads)
        for wqkv, bqkv, wo, bo, l1w, l1b, wi, bi, w2, b2, l2w, l2b in self.layers:
            a = attend(torch.addmm(bqkv, x, wqkv).view(shape))
            x = F.layer_norm(torch.addmm(bo, a, wo).add_(x), (h,), l1w, l1b, eps)
            y = torch.addmm(b2, self.act(torch.addmm(bi, x, wi)), w2)
            x = F.layer_norm(y.add_(x), (h,), l2w, l2b, eps)
        return x


def block_attention(mask: torch.Tensor, rows: int, capacity: int) -> Callable:
    """Attention over rows with a block-diagonal mask ``[rows, 1, C, C]`` (SDPA).

    Give an additive float mask built once per batch: a boolean one is converted to float
    inside SDPA again in every layer.
    """

    def attend(qkv: torch.Tensor) -> torch.Tensor:
        t, _, heads, hd = qkv.shape
        q, k, v = qkv.view(rows, capacity, 3, heads, hd).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(t, heads * hd)

    return attend


def varlen_attention(cu_seqlens: torch.Tensor, max_seqlen: int, fn: Callable | None) -> Callable:
    """Attention over padding-free tokens split by ``cu_seqlens`` (flash-attn varlen layout)."""
    kernel = fn or varlen_attention_reference

    def attend(qkv: torch.Tensor) -> torch.Tensor:
        t, _, heads, hd = qkv.shape
        q, k, v = qkv.unbind(1)
        out = kernel(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen) if fn else \
            kernel(q, k, v, cu_seqlens, max_seqlen)
        return out.reshape(t, heads * hd)

    return attend


@dataclass
class PackedModel:
    """A transformers encoder made ready for packed forwards (any head on top)."""

    encoder: Any = field(repr=False)  # the transformers base model (BertModel, RobertaModel...)
    tokenizer: Any = field(repr=False)
    max_seq_length: int
    device: torch.device
    dtype: torch.dtype
    kind: str  # "fused" or "hf"
    fused: FusedBert | None = field(default=None, repr=False)
    position_offset: int = 0
    pad_id: int = 0
    token_types: bool = True  # the encoder takes token_type_ids (DistilBERT does not)
    name: str = ""

    @property
    def hidden(self) -> int:
        return int(self.encoder.config.hidden_size)

    @functools.cached_property
    def word_pieces(self) -> tuple[Any, torch.Tensor]:
        """The model's Rust tokenizer without special tokens, truncation or padding, and its
        input word-piece table in fp32: what a bag-of-word-pieces ranking reads without running
        a layer. Built once per loaded model (transformers sets truncation and padding on the
        shared tokenizer per call, and a bf16 table's rows are exact in fp32)."""
        from tokenizers import Tokenizer

        table = self.fused.word if self.fused is not None else \
            self.encoder.get_input_embeddings().weight
        tok = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())
        tok.no_truncation()
        tok.no_padding()
        tok.post_processor = None  # no [CLS] / [SEP]
        return tok, table.detach().float()


@dataclass
class Backbone(PackedModel):
    """Everything a packed pass needs from one sentence-transformers model."""

    model: Any = field(default=None, repr=False)  # the SentenceTransformer
    pooling: tuple[str, ...] = ("mean",)
    post_modules: list[Any] = field(default_factory=list, repr=False)  # after Pooling, in order
    normalizes: bool = False  # a Normalize module follows pooling
    dim: int = 0


def packed_encoder(hf: Any, device: torch.device, dtype: torch.dtype, name: str
                   ) -> dict[str, Any]:
    """The :class:`PackedModel` fields for a transformers encoder ``hf`` (moved to ``device``;
    BERT fused, others cast to ``dtype``); a ``ValueError`` for encoders that cannot pack."""
    cfg = hf.config
    mtype = getattr(cfg, "model_type", "")
    absolute = getattr(cfg, "position_embedding_type", "absolute") == "absolute"
    if mtype not in _HF_PACKABLE or not absolute:
        raise ValueError(
            f"packed passes need an encoder with absolute learned positions "
            f"({', '.join(sorted(_HF_PACKABLE))}); {name} is {mtype!r}"
        )
    offset = _HF_PACKABLE[mtype]
    if offset is None:
        offset = int(cfg.pad_token_id) + 1
    hf.to(device)
    hf.eval()
    fused = None
    if mtype == "bert" and type(hf).__name__ == "BertModel" and not cfg.is_decoder:
        fused = FusedBert.from_model(hf, device, dtype)
    else:
        hf.to(dtype)
    return {"encoder": hf, "device": device, "dtype": dtype,
            "kind": "fused" if fused is not None else "hf", "fused": fused,
            "position_offset": offset, "token_types": getattr(cfg, "type_vocab_size", 0) > 0,
            "name": name}


def _embedding_dim(st: Any) -> int:
    # renamed in sentence-transformers 6 (get_sentence_embedding_dimension before)
    fn = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
    return int(fn())


def _pooling_modes(module: Any) -> tuple[str, ...]:
    mode = getattr(module, "pooling_mode", None)
    if mode is None:  # older sentence-transformers: boolean flags
        cfg = module.get_config_dict()
        legacy = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                  "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                  "pooling_mode_weightedmean_tokens": "weightedmean",
                  "pooling_mode_lasttoken": "lasttoken"}
        mode = tuple(v for k, v in legacy.items() if cfg.get(k))
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    bad = [m for m in modes if m not in POOLING_MODES]
    if bad or not modes:
        raise ValueError(f"unsupported pooling mode(s) {bad or modes}; supported: {POOLING_MODES}")
    if getattr(module, "include_prompt", True) is False:
        raise ValueError("pooling with include_prompt=False is not supported by packed passes")
    return modes


def backbone_from_st(st: Any, device: torch.device, dtype: torch.dtype, name: str) -> Backbone:
    mods = list(st)
    kinds = [type(m).__name__ for m in mods]
    if len(mods) < 2 or kinds[0] != "Transformer" or kinds[1] != "Pooling":
        raise ValueError(
            f"packed passes need a Transformer followed by Pooling, got modules {kinds}"
        )
    st.to(device)
    st.eval()
    parts = packed_encoder(mods[0].auto_model, device, dtype, name)
    tok = st.tokenizer
    return Backbone(
        model=st, tokenizer=tok, max_seq_length=int(st.max_seq_length),
        pooling=_pooling_modes(mods[1]), post_modules=mods[2:],
        normalizes=any(type(m).__name__ == "Normalize" for m in mods[2:]),
        pad_id=int(tok.pad_token_id or 0), dim=_embedding_dim(st), **parts,
    )


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, device: str, dtype: str) -> Backbone:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    from ctxkit.io.models import quiet_loading

    dev = torch.device(device)
    try:
        with quiet_loading():
            st = SentenceTransformer(path, device=str(dev), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read the user's files is theirs
        # (a pickled checkpoint that torch will not unpickle, a config it cannot parse)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load a sentence-transformers model from {path!r}: "
                         f"{first}") from exc
    return backbone_from_st(st, dev, resolve_dtype(dtype, dev), name=path)


def load_backbone(model: Any, device: str | torch.device = "auto",
                  dtype: str | torch.dtype = "auto") -> Backbone:
    """A :class:`Backbone` for ``model``: None (bundled MiniLM), a local directory, or a loaded
    ``SentenceTransformer`` (used as is, on its own weights)."""
    dev = resolve_device(device)
    if model is None or isinstance(model, (str, Path)):
        if model is None:
            from ctxkit.io.tokenizers import minilm_path

            model = minilm_path()
        path = Path(model).expanduser()
        if not path.is_dir():
            raise bad_option("model", f" directory not found: {str(path)!r} (no downloads "
                                      "offline)")
        # keyed by the resolved dtype: "auto", "fast" and "float32" on a CPU without native
        # bf16 share one copy of the weights
        dt = str(resolve_dtype(dtype, dev)).removeprefix("torch.")
        return _load_cached(str(path.resolve()), str(dev), dt)
    if type(model).__name__ != "SentenceTransformer" and not hasattr(model, "tokenizer"):
        raise bad_option("model", f" must be None, a directory or a SentenceTransformer, got "
                                  f"{type(model).__name__}")
    return backbone_from_st(model, dev, resolve_dtype(dtype, dev), name=type(model).__name__)
