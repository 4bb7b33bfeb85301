"""Dedup of chat histories: repeated user or assistant turns collapse to one.

``dedup_messages`` is what chat compression calls before spending budget: a re-asked
question, a pasted-twice snippet, or a string of "thanks!" / "thank you so much" turns keep
one copy (the latest by default, so the conversation still ends the way it did). System
(and developer) prompts are never touched, nor are tool calls and tool results, whose
pairing a model API checks. Turns are only compared within the same role.

Example:
    >>> msgs = [{"role": "system", "content": "Be brief."},
    ...         {"role": "user", "content": "How do I reverse a list in Python?"},
    ...         {"role": "assistant", "content": "Use reversed(xs) or xs[::-1]."},
    ...         {"role": "user", "content": "thanks!"},
    ...         {"role": "user", "content": "how do i reverse a list in Python, please??"},
    ...         {"role": "user", "content": "Thank you so much."}]
    >>> out = dedup_messages(msgs)
    >>> out.kept
    [0, 2, 4, 5]
    >>> [(e["index"], e["duplicate_of"], e["method"]) for e in out.ledger]
    [(1, 4, 'minhash'), (3, 5, 'ack')]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.deduplication.normalize import Normalization
from ctxkit.deduplication.pipeline import check_threshold, dedup, parse_methods
from ctxkit.errors import InputError
from ctxkit.io.messages import (
    OPENAI_ROLES,
    ROLE_ALIASES,
    SYSTEM_ROLES,
    TOOL_RESULT_ROLES,
    is_courtesy,
    parse_messages,
)
from ctxkit.options import bad_option

__all__ = ["DedupMessagesResult", "dedup_messages", "is_acknowledgement"]

# never removed: instructions and tool results (a call needs its result)
PROTECTED_ROLES = SYSTEM_ROLES | TOOL_RESULT_ROLES
_ACK_TOKEN = "\x01ack\x01"
def is_acknowledgement(text: str) -> bool:
    """True for a turn made only of thanks/ok phrases, like "thanks!" or "Thank you so much"
    (:func:`ctxkit.io.messages.is_courtesy`, the one list every stage uses).

    Example:
        >>> is_acknowledgement("Thank you so much!!"), is_acknowledgement("thanks, but why?")
        (True, False)
    """
    return is_courtesy(text)


@dataclass
class DedupMessagesResult:
    """Kept messages (input order), their input indices, and one ledger row per removed turn.

    A ledger row: ``index`` and ``role`` of the removed turn, ``duplicate_of`` (the input
    index of the kept turn), ``method`` (``exact``, ``ack``, ``minhash``, ``semantic``) and
    ``similarity``.
    """

    messages: list[dict[str, Any]]
    kept: list[int]
    ledger: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_removed(self) -> int:
        return len(self.ledger)


def _removable_roles(roles: Any) -> list[str]:
    """``roles`` as the internal role names turns are matched on, protected ones left out."""
    known = OPENAI_ROLES | set(ROLE_ALIASES) | TOOL_RESULT_ROLES
    out: list[str] = []
    for r in validate.texts(roles, "roles", "role"):
        if r not in known:
            raise bad_option("roles", f": unknown role {r!r}; known: "
                                      f"{', '.join(sorted(known))}")
        role = ROLE_ALIASES.get(r, r)
        if role not in PROTECTED_ROLES and role not in out:
            out.append(role)
    return out


def dedup_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    method: str | Sequence[str] = ("exact", "minhash"),
    threshold: float | Mapping[str, float] | None = None,
    keep: str = "latest",
    roles: Sequence[str] = ("user", "assistant"),
    acknowledgements: bool = True,
    **options: Any,
) -> DedupMessagesResult:
    """Collapse near-duplicate turns of a chat history.

    Args:
        messages: ``{"role", "content", ...}`` dicts (OpenAI style), in order.
        method: dedup stages, as for :func:`ctxkit.dedup.dedup` (add ``"semantic"`` to
            catch paraphrased questions; it loads the embedding model).
        threshold: as for ``dedup`` (MinHash Jaccard default 0.7, semantic cosine 0.9).
        keep: ``"latest"`` keeps the last turn of each group, ``"first"`` the first.
        roles: roles whose turns may be removed, OpenAI names or ShareGPT ones (``human``
            is ``user``, ``gpt`` is ``assistant``); an unknown role is an
            :class:`~ctxkit.errors.OptionError` (a typo would otherwise remove nothing).
            System/developer prompts, tool results and messages carrying tool calls are
            never removed whatever this says.
        acknowledgements: treat turns made only of thanks/ok phrases as duplicates of one
            another (method ``"ack"``).
        options: passed to ``dedup`` (``encoder=``, ``num_perm=``...). Unless
            ``normalization`` is given, punctuation is ignored too (short turns differ mostly
            in "?" and "!").

    Returns:
        :class:`DedupMessagesResult` with the kept messages (the same dict objects) and a ledger.
    """
    keep_rule = {"latest": "last", "last": "last", "first": "first"}.get(keep)
    if keep_rule is None:
        raise InputError(f"keep must be 'latest' or 'first', got {keep!r}")
    removable = _removable_roles(roles)
    check_threshold(threshold, parse_methods(method))
    norm_keys = {"normalization", "nfkc", "case", "whitespace", "punctuation"}
    if not norm_keys & set(options) and set(parse_methods(method)) & {"exact", "minhash"}:
        options["normalization"] = Normalization(punctuation=True)
    parsed = parse_messages(messages)  # OpenAI or ShareGPT turns, checked up front
    duplicate_of = np.full(len(messages), -1, dtype=np.int64)
    ledger: list[dict[str, Any]] = []
    for role in removable:
        idx, texts, acks = [], [], []
        for i, m in enumerate(parsed):
            # images/audio are not comparable as text; tool calls and results are paired
            if m.role != role or m.media or m.calls_tool or m.tool_call_id is not None:
                continue
            ack = acknowledgements and is_acknowledgement(m.text)
            idx.append(i)
            acks.append(ack)
            texts.append(_ACK_TOKEN if ack else m.text)
        if len(texts) < 2:
            continue
        res = dedup(texts, method=method, threshold=threshold, keep=keep_rule, **options)
        for local in res.removed:
            target = int(res.duplicate_of[local])
            i, j = idx[local], idx[target]
            duplicate_of[i] = j
            both_ack = acks[local] and acks[int(res.matched[local])]
            ledger.append(
                {
                    "index": i,
                    "role": role,
                    "duplicate_of": j,
                    "method": "ack"
                    if both_ack and res.method[local] == "exact"
                    else res.method[local],
                    "similarity": round(float(res.similarity[local]), 6),
                }
            )
    ledger.sort(key=lambda e: e["index"])
    kept = [i for i in range(len(messages)) if duplicate_of[i] < 0]
    return DedupMessagesResult(messages=[messages[i] for i in kept], kept=kept, ledger=ledger)
