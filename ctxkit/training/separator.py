"""Frozen separator rows: the separator token's embedding (and output row) never trains.

Packing appends a separator (often EOS) after every segment. When the separator's input
embedding and output row keep training, they learn to carry information from one segment to
the next, and a separator that is new to the model (added for packing) drifts away from the
rest of the vocabulary. :func:`freeze_token_rows` keeps those rows exactly as they are.

How:

- a gradient hook on the input embedding's weight (and on the output projection's weight and
  bias, when the model has one that is not tied to the embedding) zeroes the rows of the frozen
  tokens, so ``.grad`` holds zeros there and gradient clipping, logging and the optimizer see no
  gradient for them;
- a zero gradient is not enough: AdamW's decoupled weight decay shrinks every row
  (``w -= lr * weight_decay * w``), and momentum from earlier steps keeps moving a row. So the
  rows are saved when frozen and copied back after every ``optimizer.step()`` by an optimizer
  step hook: on the given ``optimizer``, or, with none, on every optimizer of the process
  (``torch.optim.optimizer.register_optimizer_step_post_hook``), which covers trainers that
  build their optimizer later (transformers' ``Trainer``, TRL). Restoring costs a copy of a
  few rows per step.

The limit: rows changed by anything other than an optimizer step (a manual in-place edit) are
restored at the next step. Sparse embedding gradients (``nn.Embedding(sparse=True)``) are not
supported.

Example:
    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    >>> model.get_input_embeddings = lambda: model[0]
    >>> model.get_output_embeddings = lambda: model[1]
    >>> frozen = freeze_token_rows(model, [2])
    >>> before = model[0].weight[2].clone()
    >>> opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)
    >>> model(torch.tensor([1, 2, 3])).sum().backward()
    >>> opt.step()
    >>> torch.equal(model[0].weight[2], before), model[0].weight.grad[2].abs().sum().item()
    (True, 0.0)
    >>> frozen.remove()
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.errors import InputError
from ctxkit.options import bad_option

__all__ = ["FreezeTokenRowsResult", "freeze_token_rows"]


@dataclass(eq=False)
class FreezeTokenRowsResult:
    """The handle of frozen rows: ``remove()`` (or leaving a ``with`` block) lets them train
    again. ``token_ids`` are the frozen rows; ``parameters`` the tensors they are rows of (one
    when the output projection is tied to the input embedding or absent, else two, plus the
    output bias when there is one)."""

    token_ids: list[int]
    parameters: list[Any] = field(repr=False)
    _handles: list[Any] = field(repr=False)
    _saved: list[Any] = field(repr=False)

    def restore(self) -> None:
        """Copy the saved rows back (the optimizer hook does this after every step)."""
        import torch

        with torch.no_grad():
            for param, saved in zip(self.parameters, self._saved):
                index = torch.as_tensor(self.token_ids, device=param.device)
                param.index_copy_(0, index, saved.to(param.device, param.dtype))

    def remove(self) -> None:
        """Stop freezing: remove the gradient and optimizer hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> FreezeTokenRowsResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _token_ids(token_ids: Any, vocab: int) -> list[int]:
    ids = [token_ids] if isinstance(token_ids, (int, np.integer)) else token_ids
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise bad_option("token_ids", f" must be a token id or a list of them, got {token_ids!r}")
    ids = list(ids)
    if not ids:
        raise bad_option("token_ids", " must name at least one token")
    for t in ids:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)) \
                or not 0 <= t < vocab:
            raise bad_option("token_ids", f" must be integers in 0..{vocab - 1} (the model's "
                                          f"vocabulary), got {t!r}")
    return sorted({int(t) for t in ids})


def _zero_rows(index):
    def hook(grad):
        return grad.index_fill(0, index.to(grad.device), 0)

    return hook


def freeze_token_rows(model: Any, token_ids: Any, *, optimizer: Any = None
                      ) -> FreezeTokenRowsResult:
    """Keep the rows of ``token_ids`` in ``model``'s input embedding (and untied output
    projection) exactly unchanged through training.

    Args:
        model: a torch module with ``get_input_embeddings()`` (every transformers model), and
            optionally ``get_output_embeddings()``.
        token_ids: the separator's id, or several ids.
        optimizer: restore the rows after this optimizer's steps; None restores them after the
            step of any optimizer (for trainers that create theirs later).

    Returns a :class:`FreezeTokenRowsResult`; call ``remove()`` on it to unfreeze. How and why
    both hooks are needed: module docs.

    Example:
        >>> import torch
        >>> emb = torch.nn.Embedding(5, 2)
        >>> emb.get_input_embeddings = lambda: emb
        >>> with freeze_token_rows(emb, 4) as frozen:
        ...     frozen.token_ids, len(frozen.parameters)
        ([4], 1)
    """
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    get_in = getattr(model, "get_input_embeddings", None)
    embedding = get_in() if callable(get_in) else None
    weight = getattr(embedding, "weight", None)
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 2:
        raise InputError("model: no input embedding matrix (it needs get_input_embeddings(), "
                         "as transformers models have)")
    ids = _token_ids(token_ids, weight.shape[0])
    params = [weight]
    get_out = getattr(model, "get_output_embeddings", None)
    output = get_out() if callable(get_out) else None
    out_weight = getattr(output, "weight", None)
    if isinstance(out_weight, torch.nn.Parameter) and out_weight is not weight:
        if out_weight.shape[0] <= ids[-1]:
            raise bad_option("token_ids", f" {ids[-1]} is outside the output projection's "
                                          f"{out_weight.shape[0]} rows")
        params.append(out_weight)
        bias = getattr(output, "bias", None)
        if isinstance(bias, torch.nn.Parameter):
            params.append(bias)
    index = torch.as_tensor(ids, dtype=torch.long)
    handles = [p.register_hook(_zero_rows(index)) for p in params]
    saved = [p.detach()[index.to(p.device)].clone() for p in params]
    result = FreezeTokenRowsResult(token_ids=ids, parameters=params, _handles=handles,
                                   _saved=saved)

    def after_step(*_: Any) -> None:
        result.restore()

    handles.append(optimizer.register_step_post_hook(after_step) if optimizer is not None
                   else register_optimizer_step_post_hook(after_step))
    return result
