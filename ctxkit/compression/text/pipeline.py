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
kept verbatim; when they alone need more than the budget, that is an
:class:`~ctxkit.errors.OptionError` naming ``budget``, never a silent overshoot. Every dropped
unit is in ``CompressResult.units`` with its score and reason.

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
from ctxkit.compression.options import GRANULARITIES, CompressOptions, check_budget
from ctxkit.compression.scoring.base import Scorer
from ctxkit.compression.scoring.registry import check_scorer, get_scorer
from ctxkit.compression.scoring.tfidf import tfidf_similarity
from ctxkit.compression.text.fallback_units import MAX_UNIT_TOKENS, cap_units
from ctxkit.compression.text.multihop import chunk_links, repeated_title
from ctxkit.compression.text.selection import coarse_to_fine_scores, greedy_mmr, unit_scores
from ctxkit.compression.text.units import forced_mask, input_units, render_units, split_units
from ctxkit.compression.text.word_pruning import FILLER, fit_tokens, prune_atoms
from ctxkit.deduplication.near import near_duplicates
from ctxkit.io.tokenizers import resolve_tokenizer
from ctxkit.options import bad_option, takes_options

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

    Args:
        text_or_chunks: one text, or retrieved chunks (each a unit of the coarse step).
        budget: tokens the result may have under ``tokenizer`` (>= 1).
        query: what the result must answer; relevance to it ranks the units.
        options: a :class:`~ctxkit.compression.options.CompressOptions`; every option keyword
            given applies on top of it. The options:
        tokenizer: name or :class:`~ctxkit.io.tokenizers.Tokenizer` the budget counts in.
        scorer: ``"embedding"`` (default: the bundled MiniLM fused with BM25, one model pass
            over the chunks), ``"idf"`` (lexical, no model), ``"lm"`` or a
            :class:`~ctxkit.compression.scoring.base.Scorer`.
        granularity: ``"coarse-to-fine"`` (default: chunks ranked by relevance, then
            sentences selected, see the module docstring), ``"sentence"`` or ``"chunk"`` (list
            items, or paragraphs of a string) select whole units scored alone; ``"token"``
            keeps every unit and drops low-information words.
        force_keep: strings whose units are always kept verbatim.
        reorder: ``"original"`` order, or ``"sort"``: kept units by score, most useful first
            (LongLLMLingua).
        token_drop: share in [0, 1) of each kept unit's words also dropped.
        dedup_threshold, redundancy, query_weight: the near-duplicate, MMR and
            relevance-against-information weights of the module docstring's formulas.
        gap_marker: text shown where kept units that were not adjacent meet (``"…"``;
            counted in the budget); default none.

    Returns:
        A :class:`CompressResult`: the text (never over ``budget``; a kept chunk's first
        sentence without the chunk's title when it repeats every word of it) and a ledger
        of every unit with its score and, for a dropped or shortened one, the reason.

    Raises:
        OptionError: a budget under 1, a budget too small for the ``force_keep`` parts, or a
            bad option.

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
    budget = int(budget)
    tok = resolve_tokenizer(options.tokenizer)
    sc = get_scorer(check_scorer(options.scorer))
    draft = _Draft.split(text_or_chunks, options, tok)
    original = render_units(draft.pairs, range(len(draft.pairs)))
    original_tokens = tok.count(original)
    if original_tokens <= budget:  # nothing to do: keep it verbatim
        draft.picked[:] = True
        text = original
    else:
        draft.cap(budget)
        _check_forced(draft, budget)
        _score(draft, sc, query, budget)
        _drop_duplicates(draft)
        protect = {a.lower() for _, _, a in atoms(query or "") if not is_protected(a)} - FILLER
        if options.granularity == "token":
            draft.picked = draft.alive.copy()
            _prune_words(draft, budget, protect)
        else:
            _select(draft, sc, budget, protect)
        text = _fit(draft, budget)
    return CompressResult(text, original_tokens, tok.count(text), budget, draft.ledger(),
                          options.granularity, sc.name)


@dataclass
class _Draft:
    """What the phases of :func:`compress` share: the units (``pairs``: body and the separator
    after it; ``owner``: the chunk of each), their token counts, scores and self-information,
    which are still candidates (``alive``), which are picked, their emitted short forms and
    the ledger's reasons so far."""

    pairs: list[tuple[str, str]]
    owner: list[int]
    options: CompressOptions
    tok: Any
    tokens: np.ndarray = field(init=False)
    forced: np.ndarray = field(init=False)
    scores: np.ndarray = field(init=False)
    bits: list[Any] = field(init=False)
    alive: np.ndarray = field(init=False)
    picked: np.ndarray = field(init=False)
    reason: dict[int, str] = field(default_factory=dict)
    code: dict[int, str] = field(default_factory=dict)  # the reason as data (REASON_CODES)
    compressed: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    untitled: dict[int, tuple[str, list[str]]] = field(default_factory=dict)

    @classmethod
    def split(cls, text_or_chunks: str | Sequence[str], options: CompressOptions, tok: Any
              ) -> _Draft:
        pairs, owner = input_units(text_or_chunks, options.granularity)
        draft = cls(pairs, owner, options, tok)
        draft._measure()
        return draft

    @property
    def texts(self) -> list[str]:
        return [b for b, _ in self.pairs]

    def count(self, batch: Sequence[str]) -> list[int]:
        return [len(t) for t in self.tok.encode_batch(list(batch))]

    def _measure(self) -> None:
        n = len(self.pairs)
        self.tokens = np.asarray(self.count(self.texts), dtype=np.int64)
        self.forced = forced_mask(self.pairs, list(self.options.force_keep))
        self.scores = np.ones(n)
        self.alive = np.ones(n, dtype=bool)
        self.picked = np.zeros(n, dtype=bool)

    def cap(self, budget: int) -> None:
        """Cut units larger than the cap on lines, clauses or a token window, so that text
        without sentence ends (transcripts, code, one-line records) still has units that fit."""
        granularity = self.options.granularity
        cap = budget if granularity == "chunk" else min(MAX_UNIT_TOKENS, budget)
        if granularity == "token" or not self.tokens.size or self.tokens.max() <= cap:
            return
        size = min(cap, max(budget // 4, 16))  # a quarter of the budget lets selection fill it
        self.pairs, self.owner = cap_units(self.pairs, self.owner, cap, self.count,
                                           list(self.options.force_keep), size)
        self._measure()

    def drop(self, i: int, reason: str, code: str) -> None:
        self.reason[i], self.code[i] = reason, code

    def render(self, mask: np.ndarray, short: dict[int, tuple[str, list[str]]]) -> str:
        """The picked units (``mask``) joined, each in its short form where it has one."""
        view = [(short[i][0], s) if i in short else (b, s) for i, (b, s) in enumerate(self.pairs)]
        order = [i for i in np.flatnonzero(mask) if view[i][0]]
        if self.options.reorder == "sort":
            order.sort(key=lambda i: -self.scores[i])
        return render_units(view, order, self.options.gap_marker)

    def ledger(self) -> list[Unit]:
        units = []
        for i, (t, n) in enumerate(zip(self.texts, self.tokens)):
            kept = bool(self.picked[i])
            why = None if kept else self.reason.get(i, "over budget")
            why_code = None if kept else self.code.get(i, "over_budget")
            short, dropped_words = self.compressed.get(i, (None, []))
            if kept and i in self.untitled:
                why, why_code = "title dropped: its sentence repeats it", "title_repeated"
            elif kept and dropped_words:
                why = f"pruned {len(dropped_words)} low-information words"
                why_code = "pruned"
            units.append(Unit(i, t, int(n), float(self.scores[i]), kept, why, self.owner[i],
                              bool(self.forced[i]), short if kept and dropped_words else None,
                              dropped_words, why_code))
        return units


def _check_forced(draft: _Draft, budget: int) -> None:
    forced_text = render_units(draft.pairs, np.flatnonzero(draft.forced))
    forced_tokens = draft.tok.count(forced_text) if draft.forced.any() else 0
    if forced_tokens > budget:
        raise bad_option("budget", f" {budget} is too small for the force_keep parts: the units "
                         f"holding them need {forced_tokens} tokens (use a finer granularity "
                         "or a larger budget)")


def _score(draft: _Draft, sc: Scorer, query: str | None, budget: int) -> None:
    """Each unit's score (the module docstring's formulas) and its words' self-information."""
    texts, tokens = draft.texts, draft.tokens
    if draft.options.granularity == "coarse-to-fine" and query:
        info, draft.bits = unit_scores(texts, tokens, sc, None)
        draft.scores = coarse_to_fine_scores(draft.pairs, draft.owner, info, sc, query,
                                             budget=budget, tokens=tokens)
    else:
        draft.scores, draft.bits = unit_scores(texts, tokens, sc, query,
                                               draft.options.query_weight)


def _drop_duplicates(draft: _Draft) -> None:
    texts = draft.texts
    dup = near_duplicates(texts, draft.options.dedup_threshold) if len(texts) > 1 else []
    for i, d in enumerate(dup):
        if d >= 0 and not draft.forced[i]:
            draft.alive[i] = False
            draft.drop(i, f"duplicate of unit {d}", "duplicate")


def _similarity(draft: _Draft, sc: Scorer) -> np.ndarray | None:
    """Pairwise similarity for the redundancy penalty, or None when it is off."""
    texts, owner = draft.texts, draft.owner
    if draft.options.redundancy <= 0 or len(texts) > 5000:
        return None
    if draft.options.granularity != "coarse-to-fine":
        return sc.similarity(texts)
    # sentences of one chunk are its context, not redundancy; across chunks a cheap lexical
    # similarity is enough to see repeated content
    sim = tfidf_similarity(texts)
    sim[np.equal.outer(owner, owner)] = 0.0
    # a chunk and the chunk it names share that name: a link, not a repeat
    links = chunk_links(draft.pairs, owner)
    sim[links[np.ix_(owner, owner)]] = 0.0
    return sim


def _select(draft: _Draft, sc: Scorer, budget: int, protect: set[str]) -> None:
    """Greedy MMR selection of whole units under the budget, then ``token_drop`` pruning."""
    opts, forced, texts = draft.options, draft.forced, draft.texts
    # first sentences that repeat their chunk's title are selected and emitted without it
    # (module docstring); with token_drop the word pruning decides
    if not opts.token_drop:
        draft.untitled = untitled_firsts(texts, draft.owner, forced)
    cost = draft.tokens.copy()
    if draft.untitled:
        cost[list(draft.untitled)] = draft.count([s for s, _ in draft.untitled.values()])
    # the coarse pass reserves room for what fine pruning will remove again
    room = int(budget / (1.0 - opts.token_drop)) if opts.token_drop else budget
    room -= int(draft.tokens[forced].sum())
    draft.picked, blamed = greedy_mmr(draft.scores, cost, draft.alive & ~forced, forced, room,
                                      _similarity(draft, sc), opts.redundancy)
    draft.compressed.update((i, draft.untitled[i]) for i in draft.untitled if draft.picked[i])
    for i, (j, s) in blamed.items():
        draft.drop(i, f"redundant with unit {j} (similarity {s:.2f})", "redundant")
    if opts.token_drop:
        force = list(opts.force_keep)
        for i in np.flatnonzero(draft.picked & ~forced):
            draft.compressed[i] = prune_atoms(texts[i], draft.bits[i], opts.token_drop,
                                              protect, force)


def _prune_words(draft: _Draft, budget: int, protect: set[str]) -> None:
    """``granularity="token"``: every unit stays; its lowest-information words go to fit."""
    picked = draft.picked
    draft.compressed = fit_tokens(draft.pairs, draft.bits, picked & ~draft.forced, budget,
                                  draft.tok, protect, list(draft.options.force_keep),
                                  lambda short: draft.render(picked, short))
    for i, (short, _) in draft.compressed.items():
        if not short:
            picked[i] = False
            draft.drop(i, "every word pruned", "every_word_pruned")


def _fit(draft: _Draft, budget: int) -> str:
    """The rendered text, the weakest unit dropped until it fits: joining can merge or split
    BPE tokens at unit borders, so the real text is counted (the forced units alone fit)."""
    text = draft.render(draft.picked, draft.compressed)
    while draft.tok.count(text) > budget:
        victims = np.flatnonzero(draft.picked & ~draft.forced)
        if victims.size == 0:  # only with reorder="sort", whose joins differ
            raise bad_option("budget", f" {budget} is too small for the force_keep parts")
        worst = int(victims[np.argmin(draft.scores[victims])])
        draft.picked[worst] = False
        draft.drop(worst, "over budget", "over_budget")
        text = draft.render(draft.picked, draft.compressed)
    return text


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
