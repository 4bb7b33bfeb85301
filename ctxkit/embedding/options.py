"""The embedding options, declared and validated once.

:class:`EmbedOptions` is what :class:`~ctxkit.embedding.encoder.PackedEncoder`, the Ray
adapter (:func:`ctxkit.distributed.embed`) and ``ctxkit embed`` take or build. Validation here
needs no torch, so a bad ``--device`` fails before any model is loaded.

:class:`ClassifyOptions` adds the truncation length of
:class:`~ctxkit.embedding.classifier.PackedClassifier` and ``ctxkit classify``.

Names: ``batch_tokens`` is the token slots of one forward pass; ``chunk_size`` is the number
of texts tokenised, packed and written together (the CLI's ``--chunk-size``). Chunks decide
which texts share a forward pass, so equal ``chunk_size`` gives bit-identical vectors on one
machine or on Ray (with torch on as many threads on both sides: on some CPUs the thread count
changes the last bits).

Example:
    >>> EmbedOptions(device="cpu", batch_tokens=2048).chunk_size
    8192
    >>> try:
    ...     EmbedOptions(device="tpu")
    ... except ValueError as exc:
    ...     print(exc)
    device 'tpu' is unknown; use auto, cpu, cuda, cuda:N or mps
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxkit.options import OptionSet, bad_option

__all__ = ["ATTENTIONS", "DTYPES", "ClassifyOptions", "EmbedOptions"]

DTYPES = ("auto", "fast", "float32", "fp32", "float16", "fp16", "bfloat16", "bf16")
ATTENTIONS = ("auto", "block", "varlen")
_DEVICE = re.compile(r"(auto|cpu|mps|cuda(:\d+)?)")
_MAX_BATCH_TOKENS = 2**24  # far above any GPU's useful forward; catches a misplaced zero


def _positive_int(value: Any, name: str, upper: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise bad_option(name, f" must be a positive integer, got {value!r}")
    if upper is not None and value > upper:
        raise bad_option(name, f" must be at most {upper:,}, got {value:,}")
    return value


def _optional_bool(value: Any, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise bad_option(name, f" must be True, False or None, got {value!r}")


@dataclass(frozen=True)
class EmbedOptions(OptionSet):
    """How texts are embedded (see :class:`~ctxkit.embedding.encoder.PackedEncoder`).

    Attributes:
        model: None (the bundled all-MiniLM-L6-v2), a local sentence-transformers directory
            (str or Path; a Ray cluster needs one every node can read), or a loaded
            ``SentenceTransformer`` (single machine only).
        device: ``auto`` (CUDA when present), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        dtype: ``auto`` (fp32 on CPU, bf16/fp16 on GPU), ``fast`` (as auto, but bf16 on CPUs
            that multiply it natively: several times faster, cosine above 0.9999 to fp32's),
            ``float32``, ``float16``, ``bfloat16``.
        batch_tokens: token slots per forward pass; None: 4096 on CPU, 65536 on GPU.
        chunk_size: texts tokenised, packed and written together (bounds memory).
        normalize: None follows the model (its ``Normalize`` module); True/False forces it.
        row_length: ``"auto"`` or a fixed packed-row length in tokens.
        attention: ``auto``, ``block`` (SDPA, block-diagonal mask) or ``varlen``.
        overlap: tokenise the next chunk while this one computes; None: on GPU only.
    """

    model: Any = None
    device: str = "auto"
    dtype: str = "auto"
    batch_tokens: int | None = None
    chunk_size: int = 8192
    normalize: bool | None = None
    row_length: int | str = "auto"
    attention: str = "auto"
    overlap: bool | None = None

    def __post_init__(self) -> None:
        if isinstance(self.model, Path):
            object.__setattr__(self, "model", str(self.model))
        device = str(self.device)  # a torch.device works too
        if not _DEVICE.fullmatch(device):
            raise bad_option("device", f" {device!r} is unknown; use auto, cpu, cuda, cuda:N "
                                       "or mps")
        object.__setattr__(self, "device", device)
        if not isinstance(self.dtype, str):  # a torch.dtype
            object.__setattr__(self, "dtype", str(self.dtype).removeprefix("torch."))
        if self.dtype not in DTYPES:
            raise bad_option("dtype", f" {self.dtype!r} is unknown; use one of "
                                      f"{', '.join(DTYPES)}")
        if self.batch_tokens is not None:
            _positive_int(self.batch_tokens, "batch_tokens", _MAX_BATCH_TOKENS)
        _positive_int(self.chunk_size, "chunk_size")
        if self.row_length != "auto":
            _positive_int(self.row_length, "row_length")
        if self.attention not in ATTENTIONS:
            raise bad_option("attention", f" must be one of {', '.join(ATTENTIONS)}, got "
                                          f"{self.attention!r}")
        _optional_bool(self.normalize, "normalize")
        _optional_bool(self.overlap, "overlap")

    _what = "embedding option"

    def encoder_kwargs(self) -> dict[str, Any]:
        """Everything except ``normalize``, which ``encode`` takes per call."""
        return {k: v for k, v in self.to_dict().items() if k != "normalize"}


@dataclass(frozen=True)
class ClassifyOptions(EmbedOptions):
    """How texts are classified (see :class:`~ctxkit.embedding.classifier.PackedClassifier`):
    the :class:`EmbedOptions` plus ``max_length``, the truncation length in tokens (None: the
    model's own; at least 2, room for ``[CLS]`` and ``[SEP]``).

    Example:
        >>> ClassifyOptions(device="cpu", max_length=128).max_length
        128
    """

    max_length: int | None = None

    _what = "classification option"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_length is not None:
            _positive_int(self.max_length, "max_length")
            if self.max_length < 2:
                raise bad_option("max_length", f" must be at least 2, got {self.max_length}")

    @classmethod
    def of(cls, options: EmbedOptions | None) -> ClassifyOptions | None:
        """``options`` as a :class:`ClassifyOptions` (an :class:`EmbedOptions` gains the
        default ``max_length``)."""
        if options is None or isinstance(options, cls):
            return options
        if not isinstance(options, EmbedOptions):
            raise bad_option("options", f" must be a ClassifyOptions, got "
                                        f"{type(options).__name__}")
        return cls(**options.to_dict())
