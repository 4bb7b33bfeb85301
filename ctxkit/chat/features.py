"""Per-message features of a chat history, computed once per distinct content.

``compress_chat`` needs, for every message, its billed token count, its self-information, its
word shingles (to find re-asked questions), its relevance inputs (the scorer's embeddings) and,
for turns that get shortened, a pruned rendering. None of these depends on the rest of the
history, so :class:`ChatFeatures` keys each by the text it was computed from and hands back
the stored value next time. ``compress_chat`` uses a fresh one per call; ``ChatMemory`` keeps
one for the whole conversation, so a call after one new message computes features for that
message only and then runs the (cheap) selection. Both paths compute every value the same way,
which is what makes their results identical. :class:`MessageTable` holds what the selection
reads of each message as arrays that grow with the history.

Example:
    >>> from ctxkit.compression.scoring.registry import IdfScorer
    >>> f = ChatFeatures("cl100k_base", IdfScorer(table={}, default=8.0))
    >>> f.count("hello world"), f.count("hello world")
    (2, 2)
    >>> f.near_duplicates(["How do I reset it?", "fine", "how do I reset it"],
    ...                   ["user", "assistant", "user"], 0.8).tolist()
    [2, -1, -1]
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.idf import IdfScorer
from ctxkit.compression.scoring.lm import LMScorer
from ctxkit.compression.scoring.registry import get_scorer
from ctxkit.io.formats import IMAGE_TOKENS, image_parts
from ctxkit.io.messages import (
    SYSTEM_ROLES,
    TOOL_CALL_ROLES,
    TOOL_RESULT_ROLES,
    answered_ids,
    is_courtesy,
)
from ctxkit.io.messages import message_text as _text
from ctxkit.io.messages import raw_role as _role
from ctxkit.io.messages import tool_call_ids as _tool_ids
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer
from ctxkit.options import bad_option

__all__ = ["ChatFeatures", "MessageTable", "billed_tokens"]


def billed_tokens(m: Mapping[str, Any], role: str, text: str, per_message: int,
                  count: Callable[[str], int], image_tokens: int = IMAGE_TOKENS) -> int:
    """Tokens a chat API bills for one message in the internal (OpenAI) form: framing, role,
    name, text (tool results included), ``image_tokens`` per image part
    (:data:`~ctxkit.io.formats.IMAGE_TOKENS`, OpenAI's low-detail cost, by default) and tool
    calls (their JSON: ids, names and arguments).

    Example:
        >>> n = len  # one token per character, to show the parts
        >>> billed_tokens({"role": "user", "content": [{"type": "image_url"}]}, "user", "", 3, n)
        92
    """
    n = per_message + count(role) + count(text) + image_tokens * image_parts(m)
    if m.get("name"):
        n += 1 + count(str(m["name"]))
    for key in ("tool_calls", "function_call"):
        if m.get(key):
            n += count(json.dumps(m[key], ensure_ascii=False, sort_keys=True))
    return n


class ChatFeatures:
    """A content-keyed store of per-message features for one tokenizer and scorer.

    ``scorer`` is resolved once, so a model-backed scorer (``"embedding"``) keeps its own
    embedding cache for as long as this object lives.
    """

    def __init__(self, tokenizer: str | Tokenizer = "cl100k_base",
                 scorer: str | Scorer = "idf"):
        self.tok = resolve_tokenizer(tokenizer)
        self.scorer = get_scorer(scorer)
        self._counts: dict[str, int] = {}
        self._info: dict[str, float] = {}
        self._shingles: dict[str, np.ndarray] = {}
        self._pruned: dict[tuple[str, float], tuple[str, int]] = {}
        # [pairs, texts, roles, latest match of each] of the last history asked about
        self._repeats: list[Any] | None = None
        # information is cached per text only when a text's bits do not depend on the texts
        # scored with it (an IdfScorer with no table and no wordfreq fits IDF on each batch)
        self._info_per_text = isinstance(self.scorer, LMScorer) or (
            isinstance(self.scorer, IdfScorer)
            and (self.scorer.table is not None or self.scorer.use_wordfreq))

    # -- tokens -----------------------------------------------------------------------------

    def count(self, text: str) -> int:
        """Tokens of ``text`` under the tokenizer."""
        n = self._counts.get(text)
        if n is None:
            n = self._counts[text] = self.tok.count(text)
        return n

    def message_tokens(self, m: Mapping[str, Any], role: str, text: str,
                       per_message: int, image_tokens: int = IMAGE_TOKENS) -> int:
        """What a chat API bills for one message (see :func:`billed_tokens`)."""
        return billed_tokens(m, role, text, per_message, self.count, image_tokens)

    # -- information and relevance ------------------------------------------------------------

    def information(self, texts: Sequence[str]) -> np.ndarray:
        """Total self-information (bits) of each text under the scorer."""
        if not self._info_per_text:
            return np.array([b.sum() for b in self.scorer.information(list(texts))],
                            dtype=np.float64)
        texts = list(texts)
        bits = np.fromiter(map(self._info.get, texts, repeat(np.nan)), np.float64, len(texts))
        missing = np.flatnonzero(np.isnan(bits))
        if len(missing):
            todo = list(dict.fromkeys(texts[i] for i in missing.tolist()))
            self._info.update(zip(todo, (float(b.sum()) for b in
                                         self.scorer.information(todo))))
            bits[missing] = [self._info[texts[i]] for i in missing.tolist()]
        return bits

    def relevance(self, texts: Sequence[str], query: str, *, tokens: Sequence[int] | None = None,
                  room: int | None = None, neighbors: float = 0.0) -> np.ndarray:
        """The scorer's relevance of each text to ``query`` (its own caches do the reuse).

        With ``room`` (tokens the caller can keep of ``texts``, ``tokens`` each), a scorer
        that has a cheap first stage (``relevance_within``) runs its model on the candidates
        only (:mod:`ctxkit.compression.scoring.shortlist`)."""
        within = getattr(self.scorer, "relevance_within", None)
        if room is not None and tokens is not None and within is not None:
            return np.asarray(within(list(texts), query, tokens, room, neighbors),
                              dtype=np.float64)
        return np.asarray(self.scorer.relevance(list(texts), query), dtype=np.float64)

    # -- near duplicates ----------------------------------------------------------------------

    def _shingle_sets(self, texts: Sequence[str]) -> list[np.ndarray]:
        from ctxkit.deduplication.near import shingle_sets

        todo = list(dict.fromkeys(t for t in texts if t not in self._shingles))
        if todo:
            self._shingles.update(zip(todo, shingle_sets(todo)))
        return [self._shingles[t] for t in texts]

    def near_duplicates(self, texts: Sequence[str], roles: Sequence[str],
                        threshold: float) -> np.ndarray:
        """For each text, the latest *later* text of the same role whose word-3-gram Jaccard
        similarity is at least ``threshold``, else -1 (a re-asked question keeps its last copy).

        The pairs are :func:`~ctxkit.deduplication.near.similar_pairs` of the stored shingle
        sets. A history asked about again with turns added at its end (``ChatMemory``) is
        compared for the new turns only (:class:`~ctxkit.deduplication.near.GrowingPairs`).
        """
        from ctxkit.deduplication.near import GrowingPairs

        if not 0.0 < threshold <= 1.0:
            raise bad_option("dedup_threshold", f" must be in (0, 1], got {threshold}")
        texts, roles = list(texts), list(roles)
        seen = self._repeats
        if seen is None or seen[0].threshold != threshold or len(texts) < len(seen[1]) or \
                texts[:len(seen[1])] != seen[1] or roles[:len(seen[2])] != seen[2]:
            seen = self._repeats = [GrowingPairs(threshold), [], [], np.zeros(0, np.int64)]
        pairs, old_texts, old_roles, latest = seen
        new = texts[len(old_texts):]
        if new:
            i, j, _ = pairs.extend(self._shingle_sets(new))
            latest = seen[3] = np.concatenate([latest, np.full(len(new), -1, np.int64)])
            old_texts.extend(new)
            old_roles.extend(roles[len(old_roles):])
            same = [roles[a] == roles[b] for a, b in zip(i.tolist(), j.tolist())]
            # each text keeps its latest match (pairs of earlier calls have smaller j)
            np.maximum.at(latest, i[same], j[same])
        return latest.copy()

    # -- shortening ---------------------------------------------------------------------------

    def pruned_tokens(self, text: str, keep: float) -> int | None:
        """Tokens of :meth:`pruned`'s rendering when the store has it, else None."""
        hit = self._pruned.get((text, keep))
        return None if hit is None else hit[1]

    def pruned(self, text: str, keep: float) -> tuple[str, int]:
        """``text`` with its least informative words dropped until about ``keep`` of its tokens
        remain (numbers, identifiers and names stay), and the result's token count.

        Query-independent (as LLMLingua-2's pruning), so it is computed once per text.
        """
        key = (text, keep)
        hit = self._pruned.get(key)
        if hit is None:
            from ctxkit.compression.text.pipeline import compress

            n = self.count(text)
            target = max(1, math.ceil(keep * n))
            short = text if target >= n else compress(
                text, target, tokenizer=self.tok, scorer=self.scorer,
                granularity="token").text
            hit = self._pruned[key] = (short, self.count(short))
        return hit

    # -- steady state -------------------------------------------------------------------------

    def prepare(self, texts: Sequence[str], keep: float) -> None:
        """Compute every query-independent feature of ``texts`` now, in batches: information,
        the scorer's vectors (``scorer.prepare`` where it has one) and the rendering pruned to
        ``keep``. ``ChatMemory`` calls it with the messages added
        since its last call, so a turn costs the query's features and the selection, and no
        candidate a new question nominates waits for the encoder.

        Example:
            >>> f = ChatFeatures("cl100k_base", "idf")
            >>> text = "The parcel left Lyon on Monday after the strike ended at noon."
            >>> f.prepare([text], 0.5)
            >>> f.pruned(text, 0.5)  # from the store
            ('parcel left Lyon Monday strike ended noon', 7)
        """
        texts = [t for t in dict.fromkeys(texts) if t]
        if not texts:
            return
        if self._info_per_text:
            self.information(texts)
        prepare = getattr(self.scorer, "prepare", None)
        if prepare is not None:
            prepare(texts)
        for text in texts:
            self.pruned(text, keep)

    # -- housekeeping -------------------------------------------------------------------------

    def __len__(self) -> int:
        """Distinct texts with a stored token count (the store's size)."""
        return len(self._counts)

    def retain(self, texts: Sequence[str]) -> None:
        """Forget features of texts not in ``texts`` (a history that was edited or trimmed)."""
        live = set(texts)
        for store in (self._info, self._shingles, self._counts):
            for t in [t for t in store if t not in live]:
                del store[t]
        for key in [k for k in self._pruned if k[0] not in live]:
            del self._pruned[key]


_FLAGS = frozenset({"calls", "blank", "filler", "system"})  # the boolean columns


def _is_call(m: Mapping[str, Any]) -> bool:
    return bool(m.get("tool_calls") or m.get("function_call")) or _role(m) in TOOL_CALL_ROLES


class MessageTable:
    """What the selection needs of each message that no query changes: its text, role, billed
    tokens, tool-call group, and whether it is a call, blank or filler. Built at once for a
    cold call; :class:`~ctxkit.chat.memory.ChatMemory` extends one as its history grows, so a
    turn reads these for the new messages only.

    Example:
        >>> from ctxkit.chat.features import ChatFeatures
        >>> table = MessageTable(ChatFeatures("cl100k_base", "idf"), per_message=3)
        >>> table.extend([{"role": "user", "content": "thanks!"},
        ...               {"role": "assistant", "content": None,
        ...                "tool_calls": [{"id": "c1", "function": {"name": "f"}}]},
        ...               {"role": "tool", "tool_call_id": "c1", "content": "42"}])
        >>> table.groups, table.calls, len(table)
        ([[0], [1, 2]], [False, True, False], 3)
    """

    def __init__(self, features: ChatFeatures, per_message: int,
                 image_tokens: int = IMAGE_TOKENS, word_keep: float | None = None):
        self.features, self.per_message, self.image_tokens = features, per_message, image_tokens
        self.word_keep = word_keep
        self.messages: list[Mapping[str, Any]] = []
        self.texts: list[str] = []
        self.roles: list[str] = []
        self.cost: list[int] = []
        self.calls: list[bool] = []
        self.blank: list[bool] = []
        self.filler: list[bool] = []  # blank, or a courtesy ("thanks!", "ok")
        self.system: list[bool] = []
        # billed tokens beyond the text (role, framing, images), and the fewest tokens the
        # text can be shortened to (its pruned rendering's when the store has it, else 1;
        # 0: never shortened, its content is not one string)
        self.framing: list[int] = []
        self.short: list[int] = []
        self.groups: list[list[int]] = []
        self.group_of: list[int] = []
        self.group_head: list[int] = []
        self._owner: dict[str, int] = {}  # call id -> its group
        self._arrays: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.messages)

    def column(self, name: str) -> np.ndarray:
        """One of the per-message lists (or ``group_head``, per group) as an array, extended
        by the new rows only, so a long history is not converted again every call."""
        values = getattr(self, name)
        have = self._arrays.get(name)
        if have is None or len(have) > len(values):
            have = np.zeros(0, dtype=bool if name in _FLAGS else np.int64)
        if len(have) < len(values):
            tail = np.array(values[len(have):], dtype=have.dtype)
            have = np.concatenate([have, tail])
        self._arrays[name] = have
        return have

    def extend(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append ``messages`` (numbered after the ones before)."""
        for m in messages:
            i = len(self.messages)
            text, role = _text(m, i), _role(m)
            self.messages.append(m)
            self.texts.append(text)
            self.roles.append(role)
            cost = self.features.message_tokens(m, role, text, self.per_message,
                                                self.image_tokens)
            self.cost.append(cost)
            self.framing.append(cost - self.features.count(text))
            known = None if self.word_keep is None else self.features.pruned_tokens(
                text, self.word_keep)
            self.short.append(0 if not isinstance(m.get("content", m.get("value")), str)
                              else max(1, known or 1))
            self.calls.append(_is_call(m))
            self.blank.append(not text.strip())
            self.filler.append(self.blank[-1] or is_courtesy(text))
            self.system.append(role in SYSTEM_ROLES)
            self._group(i, m, role)

    def learn_short(self, i: int, tokens: int) -> None:
        """Record message ``i``'s pruned length once the selection has computed it."""
        self.short[i] = tokens
        if "short" in self._arrays and i < len(self._arrays["short"]):
            self._arrays["short"][i] = tokens

    def _group(self, i: int, m: Mapping[str, Any], role: str) -> None:
        # a result joins the group of the call its id names (parallel results too, even
        # after other turns); one without an id joins the call right before it
        groups, owner = self.groups, self._owner
        ids = answered_ids(m)
        if role in TOOL_RESULT_ROLES and groups:
            g = owner.get(ids[0]) if ids else (
                len(groups) - 1 if self.calls[groups[-1][0]] else None)
            if g is not None:
                groups[g].append(i)
                self.group_of.append(g)
                return
        groups.append([i])
        self.group_head.append(i)
        self.group_of.append(len(groups) - 1)
        owner.update(dict.fromkeys(_tool_ids(m), len(groups) - 1))
