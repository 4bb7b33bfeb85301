"""The selection behind :func:`ctxkit.compress_chat` on the internal message form: protect the
system prompt and the last turns, drop filler and repeats, rank the rest, keep the best whole,
shorten the next, then mend the structure (the steps of :mod:`ctxkit.chat.pipeline`'s module
docstring, one function each, over a :class:`_Window` they share)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.chat.features import ChatFeatures, MessageTable
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.result import CompressChatResult, Ledger, MessageChange
from ctxkit.compression.options import check_budget
from ctxkit.compression.scoring.lexical import spread_to_neighbors
from ctxkit.compression.text.pipeline import compress
from ctxkit.compression.text.selection import utility
from ctxkit.io.messages import (
    SYSTEM_ROLES,
    TOOL_RESULT_ROLES,
    USER_ROLES,
    check_tool_results,
    latest_user_text,
)
from ctxkit.io.messages import message_format as _format
from ctxkit.options import bad_option

__all__ = ["MessageTable", "select", "turn_scores"]


def select(messages: Sequence[Mapping[str, Any]], budget: int, opts: ChatOptions,
           features: ChatFeatures, query: str | None = None,
           table: MessageTable | None = None) -> CompressChatResult:
    """``compress_chat`` with its options and a feature store given (``ChatMemory`` keeps one
    store for a whole conversation; the result is the same as with a fresh one).

    Args:
        messages: the history in the internal form (OpenAI or ShareGPT dicts).
        budget: tokens the window may bill (>= 1).
        opts: the chat options.
        features: the per-message feature store.
        query: what the window is chosen for (default: the latest user turn).
        table: the messages' :class:`MessageTable`, kept across calls by ``ChatMemory``
            (whose ``add`` checked their format and tool calls); built here when None.

    Returns:
        The window and its ledger (the module docstring gives the steps, in order).
    """
    check_budget(budget)
    if table is None:
        fmt = _format(messages)
        check_tool_results(messages)
        table = MessageTable(features, opts.per_message, opts.image_tokens,
                             opts.word_keep)
        table.extend(messages)
    else:
        fmt = _format(messages[:1])  # ChatMemory.add keeps one format
    win = _Window.measure(messages, int(budget), opts, features, fmt, table)
    if win.original <= budget:
        return win.result()
    room = _protect(win)
    _drop_filler_and_repeats(win)
    if query is None:
        query = latest_user_text(messages)
    cands, need = _candidates(win)
    groups = win.groups
    units = _unit_texts(win, cands)
    scores = turn_scores(features, units, need, query, opts, room)
    order = np.argsort(-scores, kind="stable")
    whole, room = _keep_whole(win, need, order, room)
    pruned: list[tuple[int, int]] = []  # (message, tokens its whole text would add)
    rest = order[~whole[order]]
    limits = _fit_limits(win, cands, need)[rest]
    pos, need_of, cands_of = 0, need.tolist(), cands.tolist()
    while pos < len(rest):
        # the turns ranked before the next one that could take any of the room cannot fit
        nxt = _first_at_most(limits, pos, room)
        win.drop_groups(cands[rest[pos:nxt]], scores[rest[pos:nxt]])
        if nxt == len(rest):
            break
        rank = int(rest[nxt])
        room = _fit_turn(win, groups[cands_of[rank]], need_of[rank], float(scores[rank]),
                         room, query, pruned)
        pos = nxt + 1
    # room left over: shortened turns get their whole text back, most relevant first
    for i, extra in pruned:
        if extra <= room and i in win.new_text:
            room -= extra
            win.unshorten(i)
    _fix_structure(win, cands_of, scores)
    return win.result()


def _unit_texts(win: _Window, cands: np.ndarray) -> list[str]:
    """Each candidate group's text: its message's, or its members' joined (a tool call and
    its results), gathered without a Python step per one-message group."""
    heads = win.table.column("group_head")[cands].tolist()
    units = list(map(win.texts.__getitem__, heads))
    for k in np.flatnonzero(~win.single_group[cands]).tolist():
        units[k] = " ".join(win.texts[i] for i in win.groups[int(cands[k])])
    return units


def _first_at_most(values: np.ndarray, start: int, bound: int, chunk: int = 256) -> int:
    """The first position from ``start`` whose value is at most ``bound`` (``len(values)``
    when none), scanning a chunk at a time: the selection's loops skip what cannot fit."""
    while start < len(values):
        hit = np.flatnonzero(values[start:start + chunk] <= bound)
        if len(hit):
            return start + int(hit[0])
        start += chunk
    return len(values)


def _fit_limits(win: _Window, cands: np.ndarray, need: np.ndarray) -> np.ndarray:
    """The fewest tokens each candidate group could take in :func:`_fit_turn`: whole, or
    (a one-message group with string content) its framing plus its shortest rendering: the
    pruned one, or ``min_shortened`` tokens cut to fit. A group whose limit exceeds the room
    is dropped without trying."""
    opts, table = win.opts, win.table
    if not opts.shorten:
        return need
    heads = table.column("group_head")[cands]
    short = table.column("short")[heads]
    framing = table.column("framing")[heads]
    fewest = framing + np.minimum(short, max(1, opts.min_shortened))
    ok = (short > 0) & win.single_group[cands]
    return np.where(ok, np.minimum(need, fewest), need)


@dataclass
class _Window:
    """What the steps of :func:`select` share: the history's texts, roles and billed tokens,
    tool call groups, what is protected and kept, shortened texts, and the ledger so far."""

    messages: Sequence[Mapping[str, Any]]
    budget: int
    opts: ChatOptions
    features: ChatFeatures
    fmt: str
    table: MessageTable
    texts: list[str]
    roles: list[str]
    cost: np.ndarray
    priming: int
    keep: np.ndarray
    groups: list[list[int]] = field(default_factory=list)
    group_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    single_group: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    protected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    new_text: dict[int, str] = field(default_factory=dict)
    ledger: Ledger = field(default_factory=Ledger)

    @classmethod
    def measure(cls, messages: Sequence[Mapping[str, Any]], budget: int, opts: ChatOptions,
                features: ChatFeatures, fmt: str, table: MessageTable) -> _Window:
        n = len(messages)
        win = cls(messages, budget, opts, features, fmt, table, table.texts, table.roles,
                  table.column("cost")[:n], opts.reply_priming if n else 0,
                  np.ones(n, dtype=bool))
        win.groups, win.group_of = table.groups, table.column("group_of")[:n]
        win.single_group = np.bincount(win.group_of, minlength=len(table.groups)) == 1
        return win

    @property
    def original(self) -> int:
        return int(self.cost.sum()) + self.priming

    @property
    def single_mask(self) -> np.ndarray:
        """Per message: whether it is alone in its group (no tool call and results)."""
        return self.single_group[self.group_of]

    def drop(self, members: Sequence[int], reason: str, score: float | None = None,
             code: str = "over_budget") -> None:
        for i in members:
            self.keep[i] = False
            if i in self.new_text:  # shortened first, dropped later
                self.unshorten(i)
            self.ledger.add(MessageChange(int(i), self.roles[i], "dropped", reason,
                                          int(self.cost[i]), 0, score, code))

    def drop_single(self, indices: np.ndarray, reason: str | Callable[[int], str], code: str,
                    details: np.ndarray | None = None) -> None:
        """:meth:`drop` for many one-message groups at once, before any was shortened."""
        self.keep[indices] = False
        self.ledger.add_batch(indices, self.roles, "dropped", code, reason, self.cost[indices],
                              details=details)

    def drop_groups(self, groups: np.ndarray, scores: np.ndarray) -> None:
        """:meth:`drop` over budget for candidate groups never tried (none was shortened)."""
        if not len(groups):
            return
        single = self.single_group[groups]
        heads = self.table.column("group_head")[groups]
        members, score, multi = [heads[single]], [scores[single]], [np.zeros(single.sum(), int)]
        for g, sc in zip(groups[~single].tolist(), scores[~single].tolist()):
            members.append(np.array(self.groups[g], np.int64))
            score.append(np.full(len(self.groups[g]), sc))
            multi.append(np.ones(len(self.groups[g]), int))
        idx = np.concatenate(members)
        self.keep[idx] = False
        self.ledger.add_batch(idx, self.roles, "dropped", "over_budget", _over_budget,
                              self.cost[idx], scores=np.concatenate(score),
                              details=np.concatenate(multi))

    def shorten(self, i: int, text: str, tokens: int, framing: int, score: float,
                reason: str) -> None:
        self.new_text[i] = text
        self.ledger.add(MessageChange(i, self.roles[i], "shortened", reason,
                                      int(self.cost[i]), framing + tokens, score, "shortened"))

    def unshorten(self, i: int) -> None:
        del self.new_text[i]
        self.ledger.discard(i)

    def result(self) -> CompressChatResult:
        out, kept, total = [], [], self.priming if self.keep.any() else 0
        for i in np.flatnonzero(self.keep):
            msg = dict(self.messages[i])
            if i in self.new_text:
                msg["content" if self.fmt == "openai" else "value"] = self.new_text[i]
                total += int(self.cost[i]) - self.features.count(self.texts[i]) + \
                    self.features.count(self.new_text[i])
            else:
                total += int(self.cost[i])
            out.append(msg)
            kept.append(int(i))
        return CompressChatResult(out, self.original, total, self.budget, kept, self.ledger,
                                  self.fmt)


def _over_budget(multi: int) -> str:
    return "over budget (tool call and results)" if multi else "over budget"


def _protect(win: _Window) -> int:
    """Protect the system prompt and the last ``keep_last`` messages (with their tool call
    groups); the room left for the rest, or an ``OptionError`` when they alone overflow."""
    opts, n = win.opts, len(win.messages)
    system = win.table.column("system")[:n]
    win.protected = system.copy() if opts.keep_system else np.zeros(n, dtype=bool)
    turns = np.flatnonzero(~system) if opts.keep_system else np.arange(n)
    for i in turns[-opts.keep_last:].tolist() if opts.keep_last else []:
        win.protected[win.groups[win.group_of[i]]] = True
    any_protected = bool(win.protected.any())
    floor = int(win.cost[win.protected].sum()) + (win.priming if any_protected else 0)
    if floor > win.budget:
        raise bad_option("budget", f" {win.budget} is too small for the kept messages: the "
                         f"system prompt and the last {opts.keep_last} message(s) need {floor} "
                         "tokens (raise the budget or lower keep_last)")
    return win.budget - floor - (0 if any_protected else win.priming)  # priming once


def _drop_filler_and_repeats(win: _Window) -> None:
    """Filler turns ("thanks!", "ok") go, and a re-asked question's earlier copies."""
    table, n = win.table, len(win.texts)
    movable = ~win.protected & win.single_mask
    filler, calls = table.column("filler")[:n], table.column("calls")[:n]
    win.drop_single(np.flatnonzero(movable & filler & ~calls), "filler", "filler")
    repeats = win.features.near_duplicates(win.texts, win.roles, win.opts.dedup_threshold)
    blank = table.column("blank")[:n]
    dup = np.flatnonzero((repeats >= 0) & win.keep & movable & ~blank)
    win.drop_single(dup, _duplicate_of, "duplicate", details=repeats[dup])


def _duplicate_of(j: int) -> str:
    return f"duplicate of message {j}"


def _candidates(win: _Window) -> tuple[np.ndarray, np.ndarray]:
    """The groups still in play (every member kept, none protected), ascending, and the
    tokens each bills whole."""
    n_groups = len(win.groups)
    out = np.zeros(n_groups, dtype=bool)
    out[win.group_of[~win.keep | win.protected]] = True
    cands = np.flatnonzero(~out)
    billed = np.bincount(win.group_of, weights=win.cost, minlength=n_groups)
    return cands, billed[cands].astype(np.int64)


def _keep_whole(win: _Window, need: np.ndarray, order: np.ndarray, room: int
                ) -> tuple[np.ndarray, int]:
    """Coarse: the most relevant turns whole, in ``whole_share`` of the room (``need``: each
    candidate's tokens). Returns which candidates are kept whole and the room left."""
    whole_room = int(room * win.opts.whole_share) if win.opts.shorten else room
    whole = np.zeros(len(need), dtype=bool)
    ranked = need[order]
    pos = _first_at_most(ranked, 0, whole_room)
    while pos < len(ranked):
        whole[order[pos]] = True
        whole_room -= int(ranked[pos])
        room -= int(ranked[pos])
        pos = _first_at_most(ranked, pos + 1, whole_room)
    return whole, room


def _fit_turn(win: _Window, members: list[int], need: int, score: float, room: int,
              query: str | None, pruned: list[tuple[int, int]]) -> int:
    """Fine: keep one candidate group (``need`` tokens whole) whole, pruned to ``word_keep``
    of its tokens, or cut to the last of the room, whichever fits first; else drop it.
    Returns the room left."""
    opts, features = win.opts, win.features
    if not opts.shorten and need <= room:
        return room - need
    i = members[0]
    text = win.texts[i]
    framing = int(win.cost[i]) - features.count(text)
    # room for the framing alone fits no shortened turn: skip the pruning work
    if opts.shorten and len(members) == 1 and room > framing and isinstance(
            win.messages[i].get("content", win.messages[i].get("value")), str):
        short, short_tokens = features.pruned(text, opts.word_keep)
        win.table.learn_short(i, max(1, short_tokens))
        if short == text and need <= room:
            return room - need
        if short.strip() and framing + short_tokens <= room:
            win.shorten(i, short, short_tokens, framing, score, "low-information words dropped")
            pruned.append((i, int(win.cost[i]) - framing - short_tokens))
            return room - framing - short_tokens
        if room - framing >= opts.min_shortened:
            cut = compress(text, room - framing, query=query, tokenizer=features.tok,
                           scorer=features.scorer, gap_marker=opts.gap_marker)
            if cut.text.strip():
                win.shorten(i, cut.text, cut.compressed_tokens, framing, score,
                            f"shortened to fit ({len(cut.dropped)} of {len(cut.units)} "
                            "sentences dropped)")
                return room - framing - cut.compressed_tokens
    win.drop(members, "over budget" + (" (tool call and results)" if len(members) > 1 else ""),
             score)
    return room


def turn_scores(features: ChatFeatures, units: list[str], tokens: np.ndarray,
                query: str | None, opts: ChatOptions, room: int | None = None) -> np.ndarray:
    """Utility of each candidate turn: relevance to ``query`` mixed with information per token
    (:func:`~ctxkit.compression.text.selection.utility`, as ``compress`` scores units), then
    spread to neighbouring turns. ``room``: the tokens the selection can keep, which lets a
    model-backed scorer embed only the turns that stand a chance
    (:mod:`ctxkit.compression.scoring.shortlist`)."""
    if not units:
        return np.zeros(0)
    info = features.information(units)
    if not query:
        return utility(info, tokens, None, opts.query_weight)
    rel = features.relevance(units, query, tokens=tokens, room=room, neighbors=opts.neighbors)
    scores = utility(info, tokens, rel, opts.query_weight)
    # a fact's question or reply sits beside it: turns borrow from their better neighbour
    return spread_to_neighbors(scores, opts.neighbors)


def _fix_structure(win: _Window, cands: list[int], scores: np.ndarray) -> None:
    """Drop kept tool results whose call is gone and, with ``alternate``, the weaker of two
    same-side turns that removals made adjacent."""
    roles, groups, group_of = win.roles, win.groups, win.group_of
    keep, protected, drop = win.keep, win.protected, win.drop
    for i in np.flatnonzero(keep):
        head = groups[group_of[i]][0]
        if roles[i] in TOOL_RESULT_ROLES and not protected[i] and (
                head == i or not keep[head]):
            drop([int(i)], "orphaned tool result", code="orphaned_tool_result")
    if not win.opts.alternate:
        return
    score_of = {g: float(s) for g, s in zip(cands, scores)}

    def side(i: int) -> str:
        return "user" if roles[i] in USER_ROLES else "assistant"

    while True:
        seq = [int(i) for i in np.flatnonzero(keep) if roles[i] not in SYSTEM_ROLES]
        bad = None
        if seq and side(seq[0]) != "user" and not protected[seq[0]]:
            bad = [seq[0]]
        for a, b in zip(seq, seq[1:]):
            if bad:
                break
            # adjacent in the input (assistant -> tool -> assistant) is the input's own shape
            if b != a + 1 and side(a) == side(b) and group_of[a] != group_of[b]:
                weak = [g for g in (int(group_of[a]), int(group_of[b]))
                        if not protected[groups[g]].any()]
                if weak:
                    bad = groups[min(weak, key=lambda g: (score_of.get(g, 0.0), -g))]
        if not bad:
            return
        drop([i for i in bad if keep[i]], "alternation", code="alternation")
