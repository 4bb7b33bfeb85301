"""Does this trainer keep packed segments apart? Run the model packed and each segment alone.

:func:`check_packing` calls the user's causal LM on a packed batch exactly as a trainer would
(the batch's own keys, the model's configured attention implementation, and its configured
``use_cache``: a training loop calls ``model(**batch)``), then on every segment alone
(unpacked, positions from the batch's start value, 0 as a rule). Per segment it reports the
largest absolute logit difference and the loss difference; a segment whose numbers differ by
more than ``atol`` *leaks*. The loss of a segment counts every label inside it, its first token
included: packed, a label there is predicted from the previous segment's last token, which
alone is impossible, so a label that crosses a boundary shows as a loss difference. The
reference loss trains only on what it should: labels on a segment's first token and, when a
completion mask or prompt lengths are given, on prompt tokens are left out.

The numbers decide whether segments leak; :mod:`ctxkit.training.diagnose` inspects the batch
to say why (positions that do not restart, an all-ones 2-D mask, labels across a boundary,
loss on prompts, a missing separator). A missing separator changes no logit, so it alone is
decided by inspection. With ``model.config.use_cache`` on, transformers builds a KV cache,
which turns its packed-sequence detection off; the packed batch then runs once more with
``use_cache=False``, and logits that differ name that cause (``use_cache``; transformers'
``Trainer`` sets the config from ``TrainingArguments.use_cache``, False by default).
``docs/check_packing.md`` describes each cause and its fix.

Example:
    >>> opts = CheckPackingOptions(separator_id=2)
    >>> opts.atol is None, opts.replace(atol=1e-3).atol
    (True, 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import OptionSet, bad_option
from ctxkit.packing.collate import IGNORE_INDEX, PackResult
from ctxkit.training.diagnose import BY_INSPECTION, PackingCause, cache_cause, diagnose
from ctxkit.training.packed_batch import BatchView, Segment, view_batch

__all__ = ["CheckPackingOptions", "CheckPackingResult", "SegmentCheck", "check_packing"]

VERDICTS = ("ok", "leak")
# default tolerance by the model's float width: float32 packed and alone agree to ~1e-6 on a
# CPU; 16-bit kernels round differently for different sequence layouts, leaks are O(0.1..1)
_ATOL = {"float64": 1e-4, "float32": 1e-4, "bfloat16": 5e-2, "float16": 5e-2}


@dataclass(frozen=True)
class CheckPackingOptions(OptionSet):
    """How :func:`check_packing` judges a batch.

    Attributes:
        atol: largest absolute difference (logits, and loss per target token) still counted as
            equal; None picks one from the model's dtype (1e-4 for float32, 5e-2 for 16-bit).
        separator_id: the token every segment must end with, when the batch claims one.
    """

    atol: float | None = None
    separator_id: int | None = None

    _what = "check_packing option"

    def __post_init__(self) -> None:
        atol = self.atol
        if atol is not None:
            if isinstance(atol, bool) or not isinstance(atol, (int, float)) or \
                    not math.isfinite(atol) or atol < 0:
                raise bad_option("atol", f" must be a finite number >= 0 or None, got {atol!r}")
            object.__setattr__(self, "atol", float(atol))
        sep = self.separator_id
        if sep is not None and (isinstance(sep, bool) or not isinstance(sep, (int, np.integer))
                                or sep < 0):
            raise bad_option("separator_id", f" must be a token id (int >= 0) or None, got "
                                             f"{sep!r}")
        if sep is not None:
            object.__setattr__(self, "separator_id", int(sep))


@dataclass(frozen=True)
class SegmentCheck:
    """One segment packed versus alone.

    ``index`` numbers the segments over all batches in row order; ``batch`` is the batch's
    position in a list (0 for a single batch); ``row``/``start``/``length`` locate it.
    ``max_logit_diff`` is the largest absolute difference of its logits; ``loss_packed`` and
    ``loss_alone`` are the mean cross-entropy over its targets (None without labels or
    targets); ``loss_diff`` is the difference of the summed loss per reference target, so an
    extra term packed (a label across a boundary) shows even when the means agree.
    """

    index: int
    batch: int
    row: int
    start: int
    length: int
    max_logit_diff: float
    loss_packed: float | None
    loss_alone: float | None
    loss_diff: float
    verdict: str
    reason: str = ""


@dataclass
class CheckPackingResult:
    """What :func:`check_packing` found.

    ``verdict`` is ``"ok"`` or ``"leak"``; ``reason`` says why in one line. ``segments`` holds
    one :class:`SegmentCheck` per segment; ``findings`` every cause the batch shows on
    inspection (:class:`~ctxkit.training.diagnose.PackingCause`, with the batch index in
    ``finding_batches``). ``batch_loss`` is the loss the model itself returns for the packed
    batch (the mean over batches of a list) and ``reference_loss`` what it should be (the
    reference targets' mean).
    """

    verdict: str
    reason: str
    segments: list[SegmentCheck]
    findings: list[PackingCause] = field(default_factory=list)
    finding_batches: list[int] = field(default_factory=list)
    attn_implementation: str = ""
    atol: float = 0.0
    batch_loss: float | None = None
    reference_loss: float | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def causes(self) -> list[str]:
        """The codes of the findings, each once, in order."""
        return list(dict.fromkeys(c.code for c in self.findings))

    @property
    def leaking(self) -> list[SegmentCheck]:
        return [s for s in self.segments if s.verdict == "leak"]

    @property
    def max_logit_diff(self) -> float:
        return max((s.max_logit_diff for s in self.segments), default=0.0)

    @property
    def max_loss_diff(self) -> float:
        return max((s.loss_diff for s in self.segments), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON reports."""
        return {
            "verdict": self.verdict, "reason": self.reason,
            "attn_implementation": self.attn_implementation, "atol": self.atol,
            "max_logit_diff": self.max_logit_diff, "max_loss_diff": self.max_loss_diff,
            "batch_loss": self.batch_loss, "reference_loss": self.reference_loss,
            "findings": [{"batch": b, "code": c.code, "message": c.message,
                          "segments": list(c.segments)}
                         for b, c in zip(self.finding_batches, self.findings)],
            "segments": [s.__dict__ for s in self.segments],
        }


def _model_state(model: Any) -> tuple[Any, Any, str]:
    try:
        param = next(model.parameters())
    except (AttributeError, StopIteration):
        raise InputError(f"model must be a torch causal LM with parameters, got "
                         f"{type(model).__name__}") from None
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None) or "eager"
    return param.device, param.dtype, impl


def _forward(model: Any, inputs: dict[str, Any], device: Any, *, as_configured: bool = False):
    """The model's output on ``inputs``; ``use_cache=False`` unless ``as_configured`` (the
    model's config decides, as in a training loop's ``model(**batch)``)."""
    import torch

    moved = {k: v.to(device) if isinstance(v, torch.Tensor) else
             torch.as_tensor(np.asarray(v)).to(device) if isinstance(v, (list, np.ndarray)) else v
             for k, v in inputs.items()}
    with torch.no_grad():
        return model(**moved) if as_configured else model(**moved, use_cache=False)


def _uses_cache(model: Any) -> bool:
    return bool(getattr(getattr(model, "config", None), "use_cache", False))


def _token_losses(logits: Any, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy of ``labels[t]`` from ``logits[t - 1]`` (t >= 1), float64; NaN off-target."""
    import torch

    lab = torch.as_tensor(labels[1:], dtype=torch.long, device=logits.device)
    keep = lab != IGNORE_INDEX
    ce = torch.nn.functional.cross_entropy(
        logits[:-1].float(), lab.clamp(min=0), reduction="none")
    out = np.full(labels.size, np.nan)
    out[1:] = torch.where(keep, ce, torch.nan).cpu().double().numpy()
    return out


def _reference_labels(view: BatchView, seg: Segment) -> np.ndarray:
    labels = view.labels[seg.row, seg.start:seg.start + seg.length].copy()
    labels[0] = IGNORE_INDEX
    if view.completion is not None:
        labels[~view.completion[seg.row, seg.start:seg.start + seg.length]] = IGNORE_INDEX
    return labels


def _apply_prompts(view: BatchView, prompts: Sequence[int] | None) -> None:
    """Fold per-segment prompt lengths into ``view.completion`` (False on prompt tokens)."""
    if prompts is None:
        return
    if len(prompts) != len(view.segments):
        raise InputError(f"prompt_lengths has {len(prompts)} entries for the batch's "
                         f"{len(view.segments)} segments")
    completion = np.ones(view.input_ids.shape, dtype=bool) if view.completion is None \
        else view.completion.copy()
    for seg, n in zip(view.segments, prompts):
        completion[seg.row, seg.start:seg.start + min(int(n), seg.length)] = False
    view.completion = completion


def _mean(values: np.ndarray) -> float | None:
    real = values[~np.isnan(values)]
    return float(real.mean()) if real.size else None


def _segment_reason(index: int, causes: list[PackingCause], impl: str) -> str:
    own = [c.message for c in causes if index in c.segments]
    shared = [c.message for c in causes if not c.segments]
    found = own or shared
    if found:
        return "; ".join(found)
    return (f"the batch shows no known cause: attention {impl!r} does not keep the segments "
            "apart with these inputs")


@dataclass
class _Totals:
    """Running sums over the batches of one check."""

    ref_sum: float = 0.0
    ref_count: int = 0
    batch_losses: list[float] = field(default_factory=list)


def _check_one(model, view: BatchView, b: int, first_index: int, causes: list[PackingCause],
               state, atol: float, totals: _Totals) -> list[SegmentCheck]:
    device, _, impl = state
    embed = getattr(model, "get_input_embeddings", lambda: None)()
    vocab = getattr(embed, "num_embeddings", None)
    if vocab is not None and view.input_ids.size and not 0 <= view.input_ids.min() <= \
            view.input_ids.max() < vocab:
        raise InputError(f"batch {b}: input_ids hold ids outside the model's vocabulary "
                         f"(0..{vocab - 1}): {int(view.input_ids.min())}.."
                         f"{int(view.input_ids.max())}")
    out = _forward(model, view.inputs, device, as_configured=True)
    logits = out.logits.reshape(*view.input_ids.shape, -1)
    if _uses_cache(model):  # does the KV cache the config asks for change the logits?
        plain = _forward(model, view.inputs, device).logits.reshape(logits.shape)
        if not float((plain.float() - logits.float()).abs().max()) <= atol:
            causes.append(cache_cause())
    if getattr(out, "loss", None) is not None:
        totals.batch_losses.append(float(out.loss))
    base = int(view.position_ids[view.segments[0].row, view.segments[0].start]) \
        if view.position_ids is not None and view.segments else 0
    checks = []
    for i, seg in enumerate(view.segments):
        ids = view.input_ids[seg.row, seg.start:seg.start + seg.length]
        alone_inputs: dict[str, Any] = {"input_ids": ids[None].astype(np.int64)}
        if base:
            alone_inputs["position_ids"] = np.arange(base, base + seg.length)[None]
        alone = _forward(model, alone_inputs, device).logits[0]
        packed = logits[seg.row, seg.start:seg.start + seg.length]
        diff = float((packed.float() - alone.float()).abs().max())
        loss_packed = loss_alone = None
        loss_diff = 0.0
        if view.labels is not None:
            row_labels = view.labels[seg.row]
            # packed: the labels inside the segment as the row's shift sees them (the first one
            # predicted from the token before the segment, when there is one)
            lo = max(seg.start, 1)
            lp = _token_losses(logits[seg.row, lo - 1:seg.start + seg.length],
                               row_labels[lo - 1:seg.start + seg.length])[1:]
            ref = _token_losses(alone, _reference_labels(view, seg))
            loss_packed, loss_alone = _mean(lp), _mean(ref)
            n_ref = int((~np.isnan(ref)).sum())
            loss_diff = abs(float(np.nansum(lp)) - float(np.nansum(ref))) / max(n_ref, 1)
            totals.ref_sum += float(np.nansum(ref))
            totals.ref_count += n_ref
        leak = not diff <= atol or not loss_diff <= atol  # NaN counts as a leak
        checks.append(SegmentCheck(
            index=first_index + i, batch=b, row=seg.row, start=seg.start, length=seg.length,
            max_logit_diff=diff, loss_packed=loss_packed, loss_alone=loss_alone,
            loss_diff=loss_diff, verdict="leak" if leak else "ok",
            reason=_segment_reason(i, causes, impl) if leak else ""))
    return checks


def _verdict(segments: list[SegmentCheck], causes: list[PackingCause]) -> tuple[str, str]:
    n = len(segments)
    leaking = [s for s in segments if s.verdict == "leak"]
    inspected = [c for c in causes if c.code in BY_INSPECTION]
    max_logit = max((s.max_logit_diff for s in segments), default=0.0)
    max_loss = max((s.loss_diff for s in segments), default=0.0)
    numbers = f"max logit diff {max_logit:.2g}, max loss diff {max_loss:.2g}"
    if leaking:
        reasons = list(dict.fromkeys(s.reason for s in leaking))
        return "leak", (f"leak: {len(leaking)} of {n} segments differ packed and alone "
                        f"({numbers}): {'; '.join(reasons)}")
    if inspected:
        return "leak", f"leak: {'; '.join(c.message for c in inspected)}"
    note = "; ".join(c.message for c in causes)
    return "ok", (f"ok: all {n} segments give the same logits and loss packed as alone "
                  f"({numbers})" + (f"; note: {note}" if note else ""))


def _as_list(batch: Any) -> list[Any]:
    if isinstance(batch, (PackResult, dict)) or hasattr(batch, "keys"):
        return [batch]
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)) and batch:
        return list(batch)
    raise InputError(f"batch must be a ctxkit PackResult, a mapping of tensors or a non-empty "
                     f"list of them, got {type(batch).__name__}")


def _per_batch(value: Any, n: int, name: str) -> list[Any]:
    if value is None:
        return [None] * n
    if n == 1:
        return [value]
    if not isinstance(value, Sequence) or len(value) != n:
        raise InputError(f"{name} must hold one entry per batch ({n}) for a list of batches")
    return list(value)


def check_packing(
    model: Any,
    batch: Any,
    *,
    atol: float | None = None,
    separator_id: int | None = None,
    segments: Sequence[Sequence[int]] | None = None,
    completion_mask: Any = None,
    prompt_lengths: Sequence[int] | None = None,
    options: CheckPackingOptions | None = None,
) -> CheckPackingResult:
    """Run ``model`` on ``batch`` as a trainer would and on each segment alone; compare.

    Args:
        model: a transformers causal LM (anything called with the batch's keys that returns
            ``.logits``); its configured attention implementation is used as it is.
        batch: a :class:`~ctxkit.packing.collate.PackResult` (``padded`` or ``flat``), a
            mapping of tensors (``DataCollatorWithFlattening``, TRL's padding-free collator),
            or a list of such.
        atol: tolerance on logits and per-token loss (see :class:`CheckPackingOptions`).
        separator_id: the token each segment must end with, when the batch claims one.
        segments: per row, the lengths of its segments, when the batch does not say where they
            are (no ``cu_seq_lens_q``, ``seq_idx``, ``segment_ids``); a list per batch for a
            list of batches.
        completion_mask: shaped like ``input_ids``, 1 where the loss may train (also read from
            the batch's ``completion_mask`` key).
        prompt_lengths: per segment (row order), how many leading tokens are prompt.
        options: a :class:`CheckPackingOptions`; keywords that differ from the defaults
            override it.

    Returns:
        A :class:`CheckPackingResult`: ``verdict`` (``ok``/``leak``), a one-line ``reason``
        naming the cause, per-segment numbers and the findings.

    Example:
        >>> import torch, transformers
        >>> from ctxkit.packing.collate import pack
        >>> _ = torch.manual_seed(0)
        >>> model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        ...     vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        ...     num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa",
        ...     use_cache=False))  # as transformers' Trainer sets it
        >>> batch = pack([[3, 4, 5], [6, 7], [8, 9, 10, 11]], capacity=8, layout="flat")
        >>> res = check_packing(model, batch)
        >>> res.verdict, len(res.segments)
        ('ok', 3)
        >>> broken = batch.to_torch()
        >>> broken["attention_mask"] = torch.ones_like(broken["input_ids"])
        >>> res = check_packing(model, broken)
        >>> res.verdict, res.causes
        ('leak', ['mask_2d'])
    """
    opts = CheckPackingOptions.resolve(options, atol=atol, separator_id=separator_id)
    state = _model_state(model)
    _, dtype, impl = state
    tol = opts.atol if opts.atol is not None else _ATOL.get(str(dtype).removeprefix("torch."),
                                                             1e-4)
    batches = _as_list(batch)
    n = len(batches)
    seg_args = _per_batch(segments, n, "segments")
    masks = _per_batch(completion_mask, n, "completion_mask")
    prompts = _per_batch(prompt_lengths, n, "prompt_lengths")
    was_training = bool(getattr(model, "training", False))
    model.eval()  # dropout would make packed and alone differ by chance
    checks: list[SegmentCheck] = []
    findings: list[PackingCause] = []
    finding_batches: list[int] = []
    totals = _Totals()
    try:
        for b, item in enumerate(batches):
            view = view_batch(item, impl, dtype, segments=seg_args[b],
                              completion_mask=masks[b])
            _apply_prompts(view, prompts[b])
            causes = diagnose(view, impl, separator_id=opts.separator_id)
            checks += _check_one(model, view, b, len(checks), causes, state, tol, totals)
            findings += causes
            finding_batches += [b] * len(causes)
    finally:
        model.train(was_training)
    verdict, reason = _verdict(checks, findings)
    return CheckPackingResult(
        verdict=verdict, reason=reason, segments=checks, findings=findings,
        finding_batches=finding_batches, attn_implementation=impl, atol=tol,
        batch_loss=float(np.mean(totals.batch_losses)) if totals.batch_losses else None,
        reference_loss=totals.ref_sum / totals.ref_count if totals.ref_count else None)
