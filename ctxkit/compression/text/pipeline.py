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

   A unit larger than ``min(200, budget)`` tokens (``budget`` for ``"chunk"``) is cut on
   lines, then clauses, then a token window (:mod:`ctxkit.compression.text.fallback_units`), so
   text without sentence ends (transcripts, logs, code, one-line records) still yields units
   that fit, and a budget that fits one atom never comes back empty.

   A chunk's title-like prefix (``"Jan Romer: Jan Romer (1869-1934) was a Polish general."``;
   :func:`~ctxkit.compression.text.multihop.repeated_title`) that its first sentence repeats word
   for word says nothing the sentence does not: that sentence is selected at its cost without
   the title and emitted without it (reason code ``"title_repeated"``), so at a tight budget
   the room goes to evidence rather than to a repeated name.

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

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ctxkit import validate
from ctxkit.compression.atoms import atoms, is_protected
from ctxkit.compression.budgeted import BudgetedResult
from ctxkit.compression.density import near_duplicates
from ctxkit.compression.options import GRANULARITIES, CompressOptions, check_budget
from ctxkit.compression.scoring.registry import check_scorer, get_scorer
from ctxkit.compression.scoring.tfidf import tfidf_similarity
from ctxkit.compression.text.fallback_units import MAX_UNIT_TOKENS, cap_units
from ctxkit.compression.text.multihop import chunk_links, repeated_title
from ctxkit.compression.text.selection import coarse_to_fine_scores, greedy_mmr, unit_scores
from ctxkit.compression.text.units import forced_mask, input_units, render_units, split_units
from ctxkit.compression.text.word_pruning import FILLER, fit_tokens, prune_atoms
from ctxkit.io.tokenizers import resolve_tokenizer
from ctxkit.options import takes_options

__all__ = [
    "GRANULARITIES",
    "REASON_CODES",
    "CompressResult",
    "Unit",
    "check_budget",
    "compress",
    "split_units",
    "unit_scores",
]


# ``Unit.code``: why a unit was dropped or shortened, as data
REASON_CODES = ("duplicate", "redundant", "over_budget", "pruned", "every_word_pruned",
                "title_repeated")


@dataclass
class Unit:
    """One unit of the input and what happened to it.

    ``reason`` is ``None`` for a unit kept whole, else why it was dropped or shortened:
    ``"duplicate of unit J"``, ``"redundant with unit J (similarity S)"``, ``"over budget"``,
    ``"pruned N low-information words"``, ``"title dropped: its sentence repeats it"``;
    ``code`` says the same as data, one of :data:`REASON_CODES`.
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




@takes_options(CompressOptions)
def compress(
    text_or_chunks: str | Sequence[str],
    budget: int,
    *,
    query: str | None = None,
    options: CompressOptions,
) -> CompressResult:
    """Shrink a text or a list of chunks to at most ``budget`` tokens, keeping what matters.

    ``granularity``: ``"coarse-to-fine"`` (default: chunks ranked by relevance, then sentences
    selected, see the module docstring), ``"sentence"`` or ``"chunk"`` (list items, or
    paragraphs of a string) select whole units scored alone; ``"token"`` keeps every unit and
    drops low-information words. ``token_drop`` (in [0, 1)) additionally drops that share of
    each kept unit's words. ``scorer``: ``"embedding"`` (default: the bundled MiniLM fused with
    BM25, one model pass over the chunks), ``"idf"`` (lexical, no model), ``"lm"`` or a
    :class:`~ctxkit.compression.scoring.registry.Scorer`. ``reorder="sort"`` emits kept units
    by score, most useful first (LongLLMLingua), instead of in their original order.

    A kept chunk's first sentence is emitted without the chunk's title when it repeats every
    word of it (module docstring). ``options``: a
    :class:`~ctxkit.compression.options.CompressOptions`; every option keyword given applies on
    top of it. Raises :class:`~ctxkit.errors.OptionError` for a
    budget under 1 or a bad option, and ``ValueError`` for a budget too small for the
    ``force_keep`` parts.

    Example:
        >>> chunks = ["Paris is the capital of France.", "Bananas are yellow.",
        ...           "The Eiffel Tower is in Paris."]
        >>> out = compress(chunks, budget=8, query="capital of France", granularity="chunk")
        >>> out.text
        'Paris is the capital of France.'
        >>> [u.text for u in out.units][2:]  # a chunk longer than the budget is cut to fit
        ['The Eiffel Tower is in', 'Paris.']
        >>> [u.reason for u in out.dropped]
        ['over budget', 'over budget', 'redundant with unit 0 (similarity 0.69)']
    """
    validate.positive_int(budget, "budget")
    validate.optional_text(query, "query")
    if not isinstance(text_or_chunks, str):
        validate.texts(text_or_chunks, "text_or_chunks", "chunk")
    opts = options
    tokenizer, granularity, reorder = opts.tokenizer, opts.granularity, opts.reorder
    scorer = check_scorer(opts.scorer)
    token_drop, dedup_threshold = opts.token_drop, opts.dedup_threshold
    redundancy, query_weight = opts.redundancy, opts.query_weight
    force = list(opts.force_keep)
    tok = resolve_tokenizer(tokenizer)
    sc = get_scorer(scorer)
    pairs, owner = input_units(text_or_chunks, granularity)
    texts = [b for b, _ in pairs]
    original = render_units(pairs, range(len(pairs)))
    original_tokens = tok.count(original)

    def count_tokens(batch: Sequence[str]) -> list[int]:
        return [len(t) for t in tok.encode_batch(list(batch))]

    tokens = np.asarray(count_tokens(texts), dtype=np.int64)
    forced = forced_mask(pairs, force)

    def result(text: str, units: list[Unit]) -> CompressResult:
        return CompressResult(text, original_tokens, tok.count(text), int(budget), units,
                              granularity, sc.name)

    if original_tokens <= budget:  # nothing to do: keep it verbatim
        units = [Unit(i, t, int(n), 1.0, True, chunk=owner[i], forced=bool(forced[i]))
                 for i, (t, n) in enumerate(zip(texts, tokens))]
        return result(original, units)

    # text without sentence ends (transcripts, code, one-line records) can leave units larger
    # than the budget: cut those on lines, clauses or a token window so that some fit
    cap = int(budget) if granularity == "chunk" else min(MAX_UNIT_TOKENS, int(budget))
    if granularity != "token" and tokens.size and tokens.max() > cap:
        # pieces of about a quarter of the budget let the selection fill it
        size = min(cap, max(int(budget) // 4, 16))
        pairs, owner = cap_units(pairs, owner, cap, count_tokens, force, size)
        texts = [b for b, _ in pairs]
        tokens = np.asarray(count_tokens(texts), dtype=np.int64)
        forced = forced_mask(pairs, force)

    forced_text = render_units(pairs, np.flatnonzero(forced))
    forced_tokens = tok.count(forced_text) if forced.any() else 0
    if forced_tokens > budget:
        raise ValueError(
            f"budget {budget} is too small for the force_keep parts: the units holding them "
            f"need {forced_tokens} tokens (use a finer granularity or a larger budget)")

    if granularity == "coarse-to-fine" and query:
        info, bits = unit_scores(texts, tokens, sc, None)
        scores = coarse_to_fine_scores(pairs, owner, info, sc, query, budget=int(budget),
                                       tokens=tokens)
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
    untitled: dict[int, tuple[str, list[str]]] = {}
    if granularity == "token":
        picked = alive.copy()
    else:
        # first sentences that repeat their chunk's title are selected and emitted without it
        # (module docstring); with token_drop the word pruning decides
        untitled = {} if token_drop else untitled_firsts(texts, owner, forced)
        cost = tokens.copy()
        if untitled:
            cost[list(untitled)] = count_tokens([short for short, _ in untitled.values()])
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
                # a chunk and the chunk it names share that name: a link, not a repeat
                links = chunk_links(pairs, owner)
                sim[links[np.ix_(owner, owner)]] = 0.0
            else:
                sim = sc.similarity(texts)
        picked, blamed = greedy_mmr(scores, cost, alive & ~forced, forced, room, sim,
                                     redundancy)
        compressed.update((i, untitled[i]) for i in untitled if picked[i])
        for i, (j, s) in blamed.items():
            reason[i], code[i] = f"redundant with unit {j} (similarity {s:.2f})", "redundant"
        if token_drop:
            for i in np.flatnonzero(picked & ~forced):
                compressed[i] = prune_atoms(texts[i], bits[i], token_drop, protect, force)

    def render(mask: np.ndarray, short: dict[int, tuple[str, list[str]]]) -> str:
        view = [(short[i][0], s) if i in short else (b, s) for i, (b, s) in enumerate(pairs)]
        order = [i for i in np.flatnonzero(mask) if view[i][0]]
        if reorder == "sort":
            order.sort(key=lambda i: -scores[i])
        return render_units(view, order)

    if granularity == "token":
        compressed = fit_tokens(pairs, bits, picked & ~forced, budget, tok, protect, force,
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
        if kept and i in untitled:
            why, why_code = "title dropped: its sentence repeats it", "title_repeated"
        elif kept and dropped_words:
            why = f"pruned {len(dropped_words)} low-information words"
            why_code = "pruned"
        units.append(Unit(i, t, int(n), float(scores[i]), kept, why, owner[i], bool(forced[i]),
                          short if kept and dropped_words else None, dropped_words, why_code))
    return result(text, units)


def untitled_firsts(texts: Sequence[str], owner: Sequence[int], forced: np.ndarray
                    ) -> dict[int, tuple[str, list[str]]]:
    """``{unit: (text without its title, the title's words)}`` for each chunk's first unit whose
    title-like prefix the rest repeats (:func:`~ctxkit.compression.text.multihop.repeated_title`);
    forced units stay verbatim.

    Example:
        >>> untitled_firsts(["Paris: Paris is in France.", "It is big.", "Nice: A city."],
        ...                 [0, 0, 1], np.zeros(3, bool))
        {0: ('Paris is in France.', ['Paris:'])}
    """
    out: dict[int, tuple[str, list[str]]] = {}
    previous = None
    for i, (text, chunk) in enumerate(zip(texts, owner)):
        first, previous = chunk != previous, chunk
        if not first or forced[i]:
            continue
        cut = repeated_title(text)
        if cut:
            out[i] = (text[cut:], text[:cut].split())
    return out
