"""Compress a text, or a set of retrieved chunks, to a token budget.

Two levels, after LLMLingua (Jiang et al. 2023) and LongLLMLingua (Jiang et al. 2024):

1. *Coarse*: split into units, drop exact and near duplicates, score every unit, then select
   greedily by score with an MMR redundancy penalty (Carbonell & Goldstein 1998) until the budget
   is full. The default, ``granularity="coarse-to-fine"``, ranks chunks (list items, or a
   string's paragraphs) by the scorer's relevance to the query first and selects sentences,
   each inheriting its chunk's relevance (LongLLMLingua's coarse-to-fine step), so relevant
   chunks stay whole and the chunk at the budget's edge keeps its best sentences::

       score_s = rel(chunk of s) + 0.25 * bm25(s, query) + 0.01 * info_s     (both rel in [0, 1])

   ``"sentence"`` and ``"chunk"`` score units alone by utility per token::

       info_i  = (sum of the unit's word self-information, bits) / tokens_i, divided by its max
       rel_i   = scorer.relevance(unit, query), divided by its max         (only with a query)
       score_i = info_i                                      without a query
       score_i = (1 - w) * info_i + w * rel_i     with a query (w = query_weight, 0.95: info
                                                  only breaks near ties)
       pick    = argmax_i  score_i - redundancy * max_{j kept} sim(i, j)

   Without a query, every granularity scores by information density alone.

2. *Fine* (``granularity="token"``, or ``token_drop > 0`` for the others): inside kept units drop
   the lowest self-information words and filler, LLMLingua-2 style (a percentile threshold per
   unit; a global one for ``"token"``). Numbers, identifiers, URLs, code spans, acronyms, query
   words and ``force_keep`` strings are atoms that are never dropped or split.

The result never exceeds ``budget`` tokens under ``tokenizer``: the rendered text is counted
exactly and the lowest-scoring unit goes until it fits. Units holding a ``force_keep`` string are
kept verbatim; when they alone need more than the budget, that is a ``ValueError``, never a
silent overshoot. Every dropped unit is in ``CompressResult.units`` with its score and reason.

Example:
    >>> text = ("The meeting is at 10:30 in room B-12. Thanks so much for asking! "
    ...         "The weather was nice. Bring the Q3 report.")
    >>> out = compress(text, budget=16, query="When and where is the meeting?", scorer="idf")
    >>> out.compressed_tokens <= 16 and "10:30" in out.text
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.compression.atoms import atoms, is_protected
from ctxkit.compression.budgeted import BudgetedResult
from ctxkit.compression.density import near_duplicates
from ctxkit.compression.options import GRANULARITIES, CompressOptions, check_budget
from ctxkit.compression.relevance import lexical_relevance
from ctxkit.compression.scorer_base import Scorer
from ctxkit.compression.scorers import check_scorer, get_scorer
from ctxkit.compression.tfidf import tfidf_similarity
from ctxkit.io.tokenizers import Tokenizer, resolve_tokenizer

__all__ = [
    "GRANULARITIES",
    "CompressResult",
    "Unit",
    "check_budget",
    "compress",
    "split_units",
    "unit_scores",
]

# coarse-to-fine: how much a sentence's own relevance adds to its chunk's (both in [0, 1])
SENTENCE_WEIGHT = 0.25
FILLER = frozenset(
    "um uh erm hmm basically actually literally really very just quite simply honestly "
    "anyway well so okay ok like totally definitely".split()
)
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_PARA = re.compile(r"[ \t]*\n[ \t]*\n\s*")
_SENT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))[ \t]+(?=\S)|[ \t]*\n\s*")
_LIST_MARKER = re.compile(r"^(?:\d{1,3}|[A-Za-z]|[ivx]{1,4})[.)]$")


@dataclass
class Unit:
    """One unit of the input and what happened to it.

    ``reason`` is ``None`` for a unit kept whole, else why it was dropped or shortened:
    ``"duplicate of unit J"``, ``"redundant with unit J (similarity S)"``, ``"over budget"``,
    ``"pruned N low-information words"``; ``code`` says the same as data: ``"duplicate"``,
    ``"redundant"``, ``"over_budget"``, ``"pruned"`` or ``"every_word_pruned"``.
    """

    index: int
    text: str
    tokens: int
    score: float
    kept: bool
    reason: str | None = None
    chunk: int = 0
    forced: bool = False
    compressed: str | None = None  # the text emitted for a kept unit, when it was pruned
    dropped_words: list[str] = field(default_factory=list)
    code: str | None = None  # ``reason`` as data: one of REASON_CODES


@dataclass
class CompressResult(BudgetedResult):
    """What ``compress`` returns: the text and a ledger of every unit."""

    text: str
    original_tokens: int
    compressed_tokens: int
    budget: int
    units: list[Unit]
    granularity: str
    scorer: str

    @property
    def kept(self) -> list[Unit]:
        return [u for u in self.units if u.kept]

    @property
    def dropped(self) -> list[Unit]:
        return [u for u in self.units if not u.kept]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._counts(),
            "granularity": self.granularity,
            "scorer": self.scorer,
            "text": self.text,
            "units": [asdict(u) for u in self.units],
        }


# ---------------------------------------------------------------------------------------------
# splitting


def _split_prose(text: str, pattern: re.Pattern) -> list[tuple[str, str]]:
    pieces: list[tuple[str, str]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            pieces.append((text[pos:m.start()], m.group()))
        elif pieces:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + m.group())
        pos = m.end()
    if pos < len(text):
        pieces.append((text[pos:], ""))
    # "1. First item": a list marker is not a sentence of its own
    merged: list[tuple[str, str]] = []
    for piece in pieces:
        if merged and _LIST_MARKER.match(merged[-1][0]):
            body, sep = merged.pop()
            piece = (body + sep + piece[0], piece[1])
        merged.append(piece)
    return merged


def split_units(text: str, granularity: str = "sentence") -> list[tuple[str, str]]:
    """Split ``text`` into ``(unit, separator)`` pairs whose concatenation is ``text``
    without its leading whitespace. Fenced code blocks are always one unit.

    Example:
        >>> split_units("One. Two!\\n\\nThree")
        [('One.', ' '), ('Two!', '\\n\\n'), ('Three', '')]
        >>> [u for u, _ in split_units("One. Two!\\n\\nThree", "chunk")]
        ['One. Two!', 'Three']
    """
    pattern = _PARA if granularity == "chunk" else _SENT
    body = text.lstrip()
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _FENCE.finditer(body):
        out.extend(_split_prose(body[pos:m.start()], pattern))
        rest = body[m.end():]
        sep = rest[: len(rest) - len(rest.lstrip())]
        out.append((m.group(), sep))
        pos = m.end() + len(sep)
    out.extend(_split_prose(body[pos:], pattern))
    return out


def _render_units(units: Sequence[tuple[str, str]], order: Sequence[int]) -> str:
    """Join units ``order`` with the strongest separator found between them."""
    parts: list[str] = []
    prev = None
    for i in order:
        if prev is not None:
            gap = [units[j][1] for j in range(prev, i)] if i > prev else [units[prev][1]]
            sep = max(gap, key=lambda s: (s.count("\n"), len(s))) or " "
            parts.append(sep)
        parts.append(units[i][0])
        prev = i
    return "".join(parts)


def _render_atoms(text: str, spans: Sequence[tuple[int, int, str]], keep: np.ndarray) -> str:
    """``text`` with the atoms where ``keep`` is False removed, whitespace tidied."""
    parts: list[str] = []
    last_end = None
    for i, (start, end, atom) in enumerate(spans):
        if not keep[i]:
            continue
        if last_end is not None:
            gap = text[last_end:start]
            sep = text[spans[i - 1][1]:start] if i else ""
            if "\n" in gap and "\n" not in sep:
                sep = "\n"
            elif not sep and any(ch.isspace() for ch in gap):
                sep = " "
            parts.append(sep)
        parts.append(atom)
        last_end = end
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# compression


def _inputs(text_or_chunks: str | Sequence[str], granularity: str
            ) -> tuple[list[tuple[str, str]], list[int]]:
    if isinstance(text_or_chunks, str):
        # coarse-to-fine ranks a string's paragraphs, keeping the separators between them
        paras = split_units(text_or_chunks, "chunk") if granularity == "coarse-to-fine" else []
        chunks = [p for p, _ in paras] or [text_or_chunks]
        joins = [sep for _, sep in paras] or [""]
    elif isinstance(text_or_chunks, (list, tuple)):
        chunks = list(text_or_chunks)
        joins = ["\n\n"] * (len(chunks) - 1) + [""]
    else:
        raise TypeError("compress needs a str or a list of str chunks, got "
                        f"{type(text_or_chunks).__name__}")
    for i, c in enumerate(chunks):
        if not isinstance(c, str):
            raise TypeError(f"chunk {i} is {type(c).__name__}, not str")
    units: list[tuple[str, str]] = []
    owner: list[int] = []
    for ci, chunk in enumerate(chunks):
        if not isinstance(text_or_chunks, str) and granularity == "chunk":
            pieces = [(chunk.strip(), "")] if chunk.strip() else []
        else:
            pieces = split_units(chunk, "chunk" if granularity == "chunk" else "sentence")
        if pieces:
            pieces[-1] = (pieces[-1][0].rstrip(), joins[ci])
        units.extend(pieces)
        owner.extend([ci] * len(pieces))
    return units, owner


def _forced_mask(units: list[tuple[str, str]], force_keep: Sequence[str]) -> np.ndarray:
    """Units overlapping an occurrence of a force_keep string, found in the joined text."""
    mask = np.zeros(len(units), dtype=bool)
    if not force_keep:
        return mask
    starts, pos = [], 0
    for body, sep in units:
        starts.append(pos)
        pos += len(body) + len(sep)
    starts_arr = np.array(starts)
    joined = "".join(b + s for b, s in units)
    for needle in force_keep:
        for m in re.finditer(re.escape(needle), joined):
            first = int(np.searchsorted(starts_arr, m.start(), side="right")) - 1
            last = int(np.searchsorted(starts_arr, m.end() - 1, side="right")) - 1
            mask[first:last + 1] = True
    return mask


def unit_scores(texts: Sequence[str], tokens: np.ndarray, scorer: Scorer, query: str | None,
                query_weight: float = 0.95) -> tuple[np.ndarray, list[np.ndarray]]:
    """Utility per token of each unit (module docstring formula) and its per-atom bits."""
    bits = scorer.information(texts)
    info = np.array([b.sum() for b in bits]) / np.maximum(tokens, 1)
    info = info / info.max() if info.size and info.max() > 0 else info
    if not query:
        return info, bits
    rel = np.asarray(scorer.relevance(texts, query), dtype=np.float64)
    rel = rel / rel.max() if rel.size and rel.max() > 0 else rel
    return (1.0 - query_weight) * info + query_weight * rel, bits


def coarse_to_fine_scores(pairs: Sequence[tuple[str, str]], owner: Sequence[int],
                          info: np.ndarray, scorer: Scorer, query: str,
                          sentence_weight: float = SENTENCE_WEIGHT) -> np.ndarray:
    """Score of each sentence: its chunk's relevance, plus ``sentence_weight`` times its own,
    plus its information density (0.01 times, to break ties only).

    Chunks (list items, or a string's paragraphs) are ranked first with ``scorer.relevance``
    (LongLLMLingua's coarse step), so whole relevant chunks keep their context; a sentence's
    own relevance is BM25 among all the sentences and decides what survives of the chunks at
    the budget's edge (one model pass over the chunks, none over the sentences).
    """
    own = np.asarray(owner)
    n_chunks = int(own.max()) + 1 if own.size else 0
    texts = [b for b, _ in pairs]
    chunk_rel = np.ones(max(n_chunks, 1))
    if n_chunks > 1:
        members = [np.flatnonzero(own == c) for c in range(n_chunks)]
        chunk_texts = [_render_units(pairs, m) for m in members]
        chunk_rel = np.asarray(scorer.relevance(chunk_texts, query), dtype=np.float64)
        top = chunk_rel.max()
        chunk_rel = chunk_rel / top if top > 0 else chunk_rel
    sent_rel = lexical_relevance(texts, query).scores
    return chunk_rel[own] + sentence_weight * sent_rel + 0.01 * info


def _greedy_mmr(scores: np.ndarray, tokens: np.ndarray, candidates: np.ndarray,
                chosen: np.ndarray, room: int, sim: np.ndarray | None, redundancy: float
                ) -> tuple[np.ndarray, dict[int, tuple[int, float]]]:
    """Pick candidates by ``score - redundancy * max sim to picked`` while they fit ``room``.

    Returns the picked mask and, for candidates whose penalty was what kept them out, the unit
    they were redundant with.
    """
    picked = chosen.copy()
    open_ = candidates.copy()
    n = len(scores)
    maxsim = np.zeros(n)
    nearest = np.full(n, -1)
    if sim is not None and picked.any():
        idx = np.flatnonzero(picked)
        sub = sim[:, idx]
        maxsim = sub.max(axis=1)
        nearest = idx[sub.argmax(axis=1)]
    while True:
        open_ &= tokens <= room
        if not open_.any():
            break
        adjusted = np.where(open_, scores - redundancy * maxsim, -np.inf)
        best = int(np.argmax(adjusted))
        picked[best] = True
        open_[best] = False
        room -= int(tokens[best])
        if sim is not None:
            closer = sim[:, best] > maxsim
            maxsim = np.where(closer, sim[:, best], maxsim)
            nearest = np.where(closer, best, nearest)
    blamed = {}
    for i in np.flatnonzero(candidates & ~picked):
        if sim is not None and nearest[i] >= 0 and maxsim[i] >= 0.5:
            blamed[int(i)] = (int(nearest[i]), float(maxsim[i]))
    return picked, blamed


def _prune_atoms(text: str, bits: np.ndarray, share: float, protect: set[str],
                 force_keep: Sequence[str]) -> tuple[str, list[str]]:
    """Drop the ``share`` lowest-information droppable atoms of ``text``."""
    spans = atoms(text)
    if not spans or share <= 0:
        return text, []
    droppable = _droppable(text, spans, protect, force_keep)
    cand = np.flatnonzero(droppable)
    k = int(np.ceil(share * len(spans)))
    k = min(k, len(cand))
    if k == 0:
        return text, []
    value = _atom_value(spans, bits)
    drop = cand[np.argsort(value[cand], kind="stable")[:k]]
    keep = np.ones(len(spans), dtype=bool)
    keep[drop] = False
    return _render_atoms(text, spans, keep), [spans[i][2] for i in sorted(drop)]


def _atom_value(spans: Sequence[tuple[int, int, str]], bits: np.ndarray) -> np.ndarray:
    value = np.asarray(bits, dtype=np.float64).copy()
    for i, (_, _, a) in enumerate(spans):
        if a.lower() in FILLER:
            value[i] = 0.0  # filler first
    return value


def _droppable(text: str, spans: Sequence[tuple[int, int, str]], protect: set[str],
               force_keep: Sequence[str]) -> np.ndarray:
    ok = np.array([not is_protected(a) and a.lower() not in protect for _, _, a in spans],
                  dtype=bool)
    for needle in force_keep:
        for m in re.finditer(re.escape(needle), text):
            for i, (s, e, _) in enumerate(spans):
                if s < m.end() and e > m.start():
                    ok[i] = False
    return ok


def compress(
    text_or_chunks: str | Sequence[str],
    budget: int,
    *,
    query: str | None = None,
    options: CompressOptions | None = None,
    tokenizer: str | Tokenizer = "cl100k_base",
    scorer: str | Scorer = "embedding",
    granularity: str = "coarse-to-fine",
    force_keep: str | Sequence[str] = (),
    reorder: str = "original",
    token_drop: float = 0.0,
    dedup_threshold: float = 0.8,
    redundancy: float = 0.5,
    query_weight: float = 0.95,
) -> CompressResult:
    """Shrink a text or a list of chunks to at most ``budget`` tokens, keeping what matters.

    ``granularity``: ``"coarse-to-fine"`` (default: chunks ranked by relevance, then sentences
    selected, see the module docstring), ``"sentence"`` or ``"chunk"`` (list items, or
    paragraphs of a string) select whole units scored alone; ``"token"`` keeps every unit and
    drops low-information words. ``token_drop`` (in [0, 1)) additionally drops that share of
    each kept unit's words. ``scorer``: ``"embedding"`` (default: the bundled MiniLM fused with
    BM25, one model pass over the chunks), ``"idf"`` (lexical, no model), ``"lm"`` or a
    :class:`~ctxkit.compression.scorers.Scorer`. ``reorder="sort"`` emits kept units by score,
    most useful first (LongLLMLingua), instead of in their original order.

    ``options``: a :class:`~ctxkit.compression.options.CompressOptions`; keywords that differ
    from their defaults apply on top of it. Raises :class:`~ctxkit.errors.OptionError` for a
    budget under 1 or a bad option, and ``ValueError`` for a budget too small for the
    ``force_keep`` parts.

    Example:
        >>> chunks = ["Paris is the capital of France.", "Bananas are yellow.",
        ...           "The Eiffel Tower is in Paris."]
        >>> out = compress(chunks, budget=8, query="capital of France", granularity="chunk")
        >>> out.text
        'Paris is the capital of France.'
        >>> [u.reason for u in out.dropped]
        ['over budget', 'redundant with unit 0 (similarity 0.57)']
    """
    validate.positive_int(budget, "budget")
    validate.optional_text(query, "query")
    if not isinstance(text_or_chunks, str):
        validate.texts(text_or_chunks, "text_or_chunks", "chunk")
    opts = CompressOptions.resolve(
        options, tokenizer=tokenizer, scorer=scorer, granularity=granularity,
        force_keep=force_keep, reorder=reorder, token_drop=token_drop,
        dedup_threshold=dedup_threshold, redundancy=redundancy, query_weight=query_weight)
    tokenizer, granularity, reorder = opts.tokenizer, opts.granularity, opts.reorder
    scorer = check_scorer(opts.scorer)
    token_drop, dedup_threshold = opts.token_drop, opts.dedup_threshold
    redundancy, query_weight = opts.redundancy, opts.query_weight
    force = list(opts.force_keep)
    tok = resolve_tokenizer(tokenizer)
    sc = get_scorer(scorer)
    pairs, owner = _inputs(text_or_chunks, granularity)
    texts = [b for b, _ in pairs]
    original = _render_units(pairs, range(len(pairs)))
    original_tokens = tok.count(original)
    tokens = np.array([len(t) for t in tok.encode_batch(texts)], dtype=np.int64)
    forced = _forced_mask(pairs, force)

    def result(text: str, units: list[Unit]) -> CompressResult:
        return CompressResult(text, original_tokens, tok.count(text), int(budget), units,
                              granularity, sc.name)

    if original_tokens <= budget:  # nothing to do: keep it verbatim
        units = [Unit(i, t, int(n), 1.0, True, chunk=owner[i], forced=bool(forced[i]))
                 for i, (t, n) in enumerate(zip(texts, tokens))]
        return result(original, units)

    forced_text = _render_units(pairs, np.flatnonzero(forced))
    forced_tokens = tok.count(forced_text) if forced.any() else 0
    if forced_tokens > budget:
        raise ValueError(
            f"budget {budget} is too small for the force_keep parts: the units holding them "
            f"need {forced_tokens} tokens (use a finer granularity or a larger budget)")

    if granularity == "coarse-to-fine" and query:
        info, bits = unit_scores(texts, tokens, sc, None)
        scores = coarse_to_fine_scores(pairs, owner, info, sc, query)
    else:
        scores, bits = unit_scores(texts, tokens, sc, query, query_weight)
    reason: dict[int, str] = {}
    code: dict[int, str] = {}  # the reason's code, for counting without parsing prose
    dup = near_duplicates(texts, dedup_threshold) if len(texts) > 1 else [-1] * len(texts)
    alive = np.ones(len(texts), dtype=bool)
    for i, d in enumerate(dup):
        if d >= 0 and not forced[i]:
            alive[i] = False
            reason[i], code[i] = f"duplicate of unit {d}", "duplicate"

    protect = {a.lower() for _, _, a in atoms(query or "") if not is_protected(a)}
    protect -= FILLER
    compressed: dict[int, tuple[str, list[str]]] = {}
    if granularity == "token":
        picked = alive.copy()
    else:
        # the coarse pass reserves room for what fine pruning will remove again
        room = int(budget / (1.0 - token_drop)) if token_drop else int(budget)
        room -= int(tokens[forced].sum())
        sim = None
        if redundancy > 0 and len(texts) <= 5000:
            if granularity == "coarse-to-fine":
                # sentences of one chunk are its context, not redundancy; across chunks a cheap
                # lexical similarity is enough to see repeated content
                sim = tfidf_similarity(texts)
                sim[np.equal.outer(owner, owner)] = 0.0
            else:
                sim = sc.similarity(texts)
        picked, blamed = _greedy_mmr(scores, tokens, alive & ~forced, forced, room, sim,
                                     redundancy)
        for i, (j, s) in blamed.items():
            reason[i], code[i] = f"redundant with unit {j} (similarity {s:.2f})", "redundant"
        if token_drop:
            for i in np.flatnonzero(picked & ~forced):
                compressed[i] = _prune_atoms(texts[i], bits[i], token_drop, protect, force)

    def render(mask: np.ndarray, short: dict[int, tuple[str, list[str]]]) -> str:
        view = [(short[i][0], s) if i in short else (b, s) for i, (b, s) in enumerate(pairs)]
        order = [i for i in np.flatnonzero(mask) if view[i][0]]
        if reorder == "sort":
            order.sort(key=lambda i: -scores[i])
        return _render_units(view, order)

    if granularity == "token":
        compressed = _fit_tokens(pairs, bits, picked & ~forced, budget, tok, protect, force,
                                 lambda short: render(picked, short))
        for i, (short, _) in compressed.items():
            if not short:
                picked[i] = False
                reason[i], code[i] = "every word pruned", "every_word_pruned"
    text = render(picked, compressed)
    # joining can merge or split BPE tokens at unit borders: count the real thing, then drop
    # the weakest unit until it fits (the forced units alone were shown to fit above)
    while tok.count(text) > budget:
        victims = np.flatnonzero(picked & ~forced)
        if victims.size == 0:  # only with reorder="sort", whose joins differ
            raise ValueError(f"budget {budget} is too small for the force_keep parts")
        worst = int(victims[np.argmin(scores[victims])])
        picked[worst] = False
        reason[worst], code[worst] = "over budget", "over_budget"
        text = render(picked, compressed)

    units = []
    for i, (t, n) in enumerate(zip(texts, tokens)):
        kept = bool(picked[i])
        why = None if kept else reason.get(i, "over budget")
        why_code = None if kept else code.get(i, "over_budget")
        short, dropped_words = compressed.get(i, (None, []))
        if kept and dropped_words:
            why = f"pruned {len(dropped_words)} low-information words"
            why_code = "pruned"
        units.append(Unit(i, t, int(n), float(scores[i]), kept, why, owner[i], bool(forced[i]),
                          short if kept and dropped_words else None, dropped_words, why_code))
    return result(text, units)


def _fit_tokens(pairs, bits, prunable, budget, tok, protect, force, render
                ) -> dict[int, tuple[str, list[str]]]:
    """Token granularity: drop the globally least informative words until the text fits."""
    order = []  # (value, unit, atom) for every droppable atom of a prunable unit
    spans_of: dict[int, list] = {}
    for i in np.flatnonzero(prunable):
        spans = atoms(pairs[i][0])
        spans_of[int(i)] = spans
        ok = _droppable(pairs[i][0], spans, protect, force)
        value = _atom_value(spans, bits[i])
        order.extend((float(value[j]), int(i), int(j)) for j in np.flatnonzero(ok))
    order.sort()
    keep = {i: np.ones(len(s), dtype=bool) for i, s in spans_of.items()}
    compressed: dict[int, tuple[str, list[str]]] = {}
    excess = tok.count(render(compressed)) - budget
    done = 0
    while excess > 0 and done < len(order):
        # a word is ~1.3 tokens: drop a bit less than the excess, then count exactly again
        step = max(1, int(excess * 0.8))
        touched = set()
        for _, i, j in order[done:done + step]:
            keep[i][j] = False
            touched.add(i)
        done += step
        for i in touched:
            spans = spans_of[i]
            compressed[i] = (_render_atoms(pairs[i][0], spans, keep[i]),
                             [spans[j][2] for j in np.flatnonzero(~keep[i])])
        excess = tok.count(render(compressed)) - budget
    return compressed
