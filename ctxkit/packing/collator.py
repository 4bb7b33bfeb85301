"""A ``collate_fn`` for PyTorch and transformers: each mini-batch of examples packed to windows.

:class:`PackedCollator` takes mappings with ``input_ids`` (and optionally ``completion_mask`` or
``labels``), packs them with :func:`ctxkit.pack` and returns torch tensors (or numpy arrays) in
the keys a model takes. With ``layout="flat"`` and a mini-batch that fits one window it returns
what transformers' ``DataCollatorWithFlattening`` returns for the same examples and flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.errors import InputError
from ctxkit.options import bad_option
from ctxkit.packing.options import PackOptions
from ctxkit.packing.result import PackResult
from ctxkit.packing.sequences import pack, required_capacity

__all__ = ["PackedCollator"]

_D = PackOptions()  # the defaults of every keyword below come from here


class PackedCollator:
    """A ``collate_fn`` that packs each mini-batch of examples into windows.

    Each example is a mapping with ``input_ids`` and optionally ``completion_mask`` (1 on target
    tokens) and/or ``labels`` (-100 kept). Returns torch tensors (``return_tensors="np"``: numpy
    arrays). For ``layout="flat"``, the keys of transformers' ``DataCollatorWithFlattening``:
    ``input_ids``, ``labels`` and ``position_ids``, plus ``cu_seq_lens_q/k`` and
    ``max_length_q/k`` with ``return_flash_attn_kwargs=True`` and ``seq_idx`` with
    ``return_seq_idx=True``, as there. A mini-batch that fits one window (its tokens, separators
    included, at most ``capacity``) keeps the order it was given, so the output equals the
    reference's; a larger one is planned with ``strategy`` and laid out window after window.
    For ``"padded"``: ``input_ids``, ``labels``,
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
        >>> collate([{"input_ids": [4, 5]}, {"input_ids": [1, 2, 3]}])["input_ids"].tolist()
        [[4, 5, 1, 2, 3]]
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
        return_flash_attn_kwargs: bool = False,
        return_seq_idx: bool = False,
        return_tensors: str = "pt",
        options: PackOptions | None = None,
    ):
        required_capacity(capacity, options, "PackedCollator")
        self.options = PackOptions.resolve(
            options, capacity=capacity, strategy=strategy, separator_id=separator_id,
            overflow=overflow, pad_id=pad_id, seed=seed, layout=layout,
            label_separators=label_separators)
        self.attention_mask = attention_mask
        for name, flag in (("return_flash_attn_kwargs", return_flash_attn_kwargs),
                           ("return_seq_idx", return_seq_idx)):
            if not isinstance(flag, (bool, np.bool_)):
                raise bad_option(name, f" must be True or False, got {flag!r}")
            if flag and self.options.layout != "flat":
                raise bad_option(name, " applies to layout='flat' (the padded layout marks "
                                       "segments with its 4-D attention_mask)")
        validate.check_choice(return_tensors, ("pt", "np"), "return_tensors")
        self.return_flash_attn_kwargs = bool(return_flash_attn_kwargs)
        self.return_seq_idx = bool(return_seq_idx)
        self.return_tensors = return_tensors

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
        opts = self.options
        if opts.layout == "flat" and opts.strategy != "greedy":
            sep = opts.separator_id is not None
            tokens = sum(len(x) + (sep and len(x) > 0) for x in ids)
            if tokens <= opts.capacity:
                # One window: lay the examples out as given, as DataCollatorWithFlattening does
                # (a planner would reorder them, e.g. longest first, to no gain).
                opts = opts.replace(strategy="greedy")
        return pack(
            ids,
            completion_mask=[_to_list(ex["completion_mask"]) for ex in examples]
            if all(has_mask) else None,
            labels=[_to_list(ex["labels"]) for ex in examples] if all(has_labels) else None,
            options=opts,
        )

    def __call__(self, examples: Sequence[Mapping[str, Any]],
                 return_tensors: str | None = None) -> dict[str, Any]:
        return_tensors = self.return_tensors if return_tensors is None else return_tensors
        validate.check_choice(return_tensors, ("pt", "np"), "return_tensors")
        packed = self.pack(examples)
        if return_tensors == "pt":
            batch = packed.to_torch(attention_mask=self.attention_mask, causal=True)
        else:
            batch = packed.as_dict(attention_mask=self.attention_mask, causal=True)
        batch.pop("segment_ids", None)  # models do not take it; PackedCollator.pack has it
        if packed.layout == "flat":
            if not self.return_flash_attn_kwargs:
                for key in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"):
                    del batch[key]
            if not self.return_seq_idx:
                del batch["seq_idx"]
        return batch


def _to_list(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value
