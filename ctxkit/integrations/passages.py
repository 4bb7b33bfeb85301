"""Retrieved passages compressed to one token budget, each passage kept, shortened or dropped.

What a retriever's post-processor needs from :func:`~ctxkit.compression.text.pipeline.compress`: the
passages go in as chunks (coarse-to-fine by default: the chunks most relevant to the query stay
whole, the next keep their best sentences), and each comes back on its own, with what happened
to it, so a framework can keep each document's metadata and score. A passage's kept sentences
are joined with the text that stood between them when they were neighbours, else with the
strongest break (paragraph, line, space) of the gap. Each kept passage is counted alone, and
their sum is at most ``budget`` (checked, and the whole compressed again under a smaller budget
in the rare case that joining moved a token boundary).

Example:
    >>> out = compress_passages(["Paris is the capital of France. It has a river.",
    ...                          "Bananas are yellow. The Seine runs through Paris."],
    ...                         10, query="capital of France", options=CompressOptions(
    ...                             scorer="idf"))
    >>> out.texts, out.kept, [(p.action, p.tokens_after) for p in out.passages]
    (['Paris is the capital of France.'], [0], [('shortened', 7), ('dropped', 0)])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ctxkit import validate
from ctxkit.compression.budgeted import BudgetedResult
from ctxkit.compression.options import CompressOptions
from ctxkit.compression.text.pipeline import CompressResult, Unit, compress
from ctxkit.io.tokenizers import resolve_tokenizer

__all__ = ["CompressPassagesResult", "PassageChange", "compress_passages"]

_TRIES = 4  # compressions under a smaller budget when joined tokens exceed it (rare: one does)


@dataclass
class PassageChange:
    """What happened to one input passage: ``action`` ``"kept"`` (verbatim), ``"shortened"``
    or ``"dropped"``; ``reason`` for a dropped one is the code of its first unit
    (``over_budget``, ``duplicate``, ``redundant``) or ``empty``."""

    index: int
    action: str
    tokens_before: int
    tokens_after: int
    units: int
    units_dropped: int
    reason: str | None = None

    def to_metadata(self, dropped: Sequence[int]) -> dict[str, Any]:
        """This change as a JSON-ready dict for a kept document's metadata, with the input
        indices of the passages ``dropped`` whole (so the output says what went missing)."""
        return {**asdict(self), "passages_dropped": list(dropped)}


@dataclass
class CompressPassagesResult(BudgetedResult):
    """The kept passages' texts (input order), their input indices, and one
    :class:`PassageChange` per input passage. ``compressed_tokens`` sums the kept texts
    counted one by one."""

    texts: list[str]
    kept: list[int]
    passages: list[PassageChange]
    original_tokens: int
    compressed_tokens: int
    budget: int
    compression: CompressResult | None = field(default=None, repr=False)

    @property
    def dropped(self) -> list[int]:
        """Input indices of the passages dropped whole."""
        return [p.index for p in self.passages if p.action == "dropped"]


def compress_passages(passages: Sequence[str], budget: int, *, query: str | None = None,
                      options: CompressOptions | None = None) -> CompressPassagesResult:
    """Compress ``passages`` together to ``budget`` tokens with ``query`` (see the module
    docstring); ``options`` as for :func:`~ctxkit.compression.text.pipeline.compress`.

    Example:
        >>> compress_passages(["One.", "Two."], 10).texts
        ['One.', 'Two.']
    """
    texts = validate.texts(passages, "passages", "passage")
    validate.positive_int(budget, "budget")
    validate.optional_text(query, "query")
    opts = options if options is not None else CompressOptions()
    if not isinstance(opts, CompressOptions):
        raise TypeError(f"options must be a CompressOptions, got {type(opts).__name__}")
    tok = resolve_tokenizer(opts.tokenizer)
    before = [tok.count(t) for t in texts]
    room = int(budget)
    for _ in range(_TRIES):
        res = compress(texts, room, query=query or None, options=opts) if texts else None
        changes, out = _per_passage(texts, before, res, tok.count)
        total = sum(c.tokens_after for c in changes)
        if total <= budget or room <= 1:
            break
        room = max(1, room - (total - int(budget)))
    kept = [c.index for c in changes if c.action != "dropped"]
    return CompressPassagesResult([out[i] for i in kept], kept, changes, sum(before), total,
                                  int(budget), res)


def _per_passage(texts: list[str], before: list[int], res: CompressResult | None,
                 count) -> tuple[list[PassageChange], list[str]]:
    units: list[list[Unit]] = [[] for _ in texts]
    for u in res.units if res is not None else []:
        units[u.chunk].append(u)
    changes, out = [], []
    for i, text in enumerate(texts):
        own = units[i]
        kept = [u for u in own if u.kept]
        rendered = _render(text, own) if kept else ""
        if not kept:
            action = "dropped"
            reason = own[0].code if own else "empty"
        elif len(kept) == len(own) and not any(u.compressed for u in own):
            action, reason, rendered = "kept", None, text
        else:
            action, reason = "shortened", None
        out.append(rendered)
        changes.append(PassageChange(i, action, before[i], count(rendered) if kept else 0,
                                     len(own), len(own) - len(kept), reason))
    return changes, out


def _render(text: str, units: list[Unit]) -> str:
    """The kept units of one passage (pruned text where pruned), joined as the module
    docstring says."""
    parts: list[str] = []
    pos, prev_end, prev_kept = 0, None, False
    for u in units:
        start = text.find(u.text, pos)
        if start < 0:  # not a slice of the passage: a space is the best join there is
            start, end = pos, pos
        else:
            end = start + len(u.text)
            pos = end
        if u.kept:
            if prev_end is not None:
                gap = text[prev_end:start]
                parts.append(gap if prev_kept and not gap.strip() else _break(gap))
            parts.append(u.compressed or u.text)
            prev_end = end
        prev_kept = u.kept
    return "".join(parts)


def _break(gap: str) -> str:
    if "\n\n" in gap:
        return "\n\n"
    return "\n" if "\n" in gap else " "
