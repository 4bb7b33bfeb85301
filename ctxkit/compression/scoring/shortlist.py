"""The cold call's first stage: cheap relevance over every unit, and the candidates the encoder
then scores.

A cold ``compress_chat`` spends nine tenths of its time in MiniLM, embedding every turn. Most
turns cannot be kept anyway (a budget of 1/4 of the history keeps about 44% of its tokens, the
rest shortened), so the encoder only has to rank the turns that stand a chance:

1. :func:`first_stage` scores every unit without the transformer: the cosine between the mean
   of the model's own *input* word-piece vectors of the unit and of the query (a bag of word
   pieces in MiniLM's space: it catches "therapist" for "counseling", which BM25 does not),
   fused with BM25 as :func:`~ctxkit.compression.scoring.lexical.hybrid_relevance` fuses the full
   signals (z-scores, ``lexical_weight`` on BM25). It costs one tokenizer pass and a gather;
2. :func:`pick_candidates` keeps the best of them until their tokens fill ``volume`` (the
   caller's free room times :data:`CANDIDATE_ROOMS`), and at least :data:`CANDIDATE_FLOOR`
   units, so a short history is never cascaded and the full ranking is the uncascaded one.

Why one room and not several: at 1/4 of the tokens the selection keeps about 44% of them (whole
and shortened turns), so candidates filling the room several times over would be the whole
history and save nothing. The first stage alone is nearly as good a ranker as the full fusion,
so a shortlist of one room loses about one question in 120 at each budget on the dev LoCoMo
questions (``python -m evals.chat_latency`` runs both paths and reports retention and
latency); candidates of 1.5 or 2 rooms, or with their neighbouring turns added, did no better
on those questions. BM25 alone as the first stage lost 4 to 9 points at the same candidate
count (an offline replay with cached embeddings): the word-piece vectors are what make the
narrow shortlist safe.

Example:
    >>> import numpy as np
    >>> pick_candidates(np.array([0.1, 0.9, 0.5, 0.7]), np.array([10, 10, 10, 10]), 15,
    ...                 floor=1).tolist()
    [1, 3]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ctxkit.compression.scoring.cache import EmbeddingCache
from ctxkit.compression.scoring.lexical import bm25
from ctxkit.embedding.vectors import Encoder, ranking_encoder, unit_rows

__all__ = ["CANDIDATE_FLOOR", "CANDIDATE_ROOMS", "WORD_PIECE_CACHE", "first_stage",
           "pick_candidates", "word_piece_vectors"]

CANDIDATE_ROOMS = 1.0  # candidates' tokens fill the caller's free room this many times
CANDIDATE_FLOOR = 64  # units the encoder always scores: histories this short are not cascaded
# word-piece vectors of the default encoder by text: a growing history (ChatMemory, a server
# replaying sessions) tokenizes each turn once, not at every call
WORD_PIECE_CACHE = EmbeddingCache()


def word_piece_vectors(texts: Sequence[str], encoder: Encoder | None = None) -> np.ndarray:
    """Unit-length mean of the encoder's input word-piece embeddings of each text
    (``[len(texts), dim]``; no transformer layer runs; a text with no word piece is zero).

    Example:
        >>> v = word_piece_vectors(["a red car", "a red automobile", "tax law"])
        >>> bool(v[0] @ v[1] > v[0] @ v[2])
        True
    """
    import torch
    import torch.nn.functional as F

    enc = ranking_encoder() if encoder is None else encoder
    backbone = enc.backbone
    table = backbone.fused.word if backbone.fused is not None else \
        backbone.encoder.get_input_embeddings().weight
    limit = enc.max_seq_length
    # the tokenizer's Rust core directly: transformers' per-text conversion of each encoding
    # cost three times the tokenization itself on a 100k-token history
    encodings = _piece_tokenizer(backbone.tokenizer).encode_batch_fast(list(texts))
    ids = [e.ids[:limit] for e in encodings]
    lengths = np.fromiter((len(x) for x in ids), np.int64, len(ids))
    flat = torch.from_numpy(np.fromiter((t for x in ids for t in x), np.int64,
                                        int(lengths.sum()))).to(table.device)
    offsets = torch.from_numpy(np.cumsum(lengths) - lengths).to(table.device)
    with torch.inference_mode():
        out = F.embedding_bag(flat, _fp32(table), offsets, mode="sum")
    return unit_rows(out.cpu().numpy())


@functools.lru_cache(maxsize=4)
def _piece_tokenizer(hf_tokenizer):
    """A private copy of the model's Rust tokenizer with no special tokens, truncation or
    padding (transformers sets those on the shared one per call)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    tok.post_processor = None  # no [CLS] / [SEP]
    return tok


@functools.lru_cache(maxsize=4)
def _fp32(table):
    """The word-piece table in fp32 (a bf16 model's, converted once: its rows are exact in
    fp32, so the sums do not round as bf16 sums would)."""
    return table.detach().float()


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros_like(x)


def first_stage(units: Sequence[str], query: str, *, lexical_weight: float = 0.4,
                vectors=None) -> np.ndarray:
    """Cheap relevance of each unit to ``query`` in [0, 1]: word-piece cosine fused with BM25
    (module docstring); ``vectors`` maps texts to unit-length rows (default
    :func:`word_piece_vectors`, cached by text in :data:`WORD_PIECE_CACHE`).

    Example:
        >>> def bag(texts):  # a stand-in for the word pieces: "sea" lies near "tide"
        ...     return unit_rows(np.array([[("tide" in t) + ("sea" in t), "bread" in t, 0.5]
        ...                                for t in texts]))
        >>> first_stage(["high tide", "the sea rose", "bread"], "when is high tide?",
        ...             vectors=bag).round(2).tolist()
        [1.0, 0.71, 0.0]
    """
    units = list(units)
    if not units:
        return np.zeros(0)
    texts = units + [query]
    vecs = np.asarray(vectors(texts) if vectors is not None else
                      WORD_PIECE_CACHE.get(texts, word_piece_vectors), dtype=np.float64)
    fused = _z(vecs[:-1] @ vecs[-1]) + lexical_weight * _z(bm25(units, query))
    lo, hi = fused.min(), fused.max()
    return (fused - lo) / (hi - lo) if hi - lo > 1e-12 else np.ones(len(units))


def pick_candidates(scores: np.ndarray, tokens: np.ndarray, volume: int,
                    floor: int = CANDIDATE_FLOOR) -> np.ndarray:
    """Indices (ascending) of the best ``scores`` whose ``tokens`` first reach ``volume``
    (the unit that crosses it included), and at least ``floor`` units.

    Example:
        >>> pick_candidates(np.array([0.2, 0.8, 0.4]), np.array([5, 5, 5]), 1, floor=2).tolist()
        [1, 2]
    """
    order = np.argsort(-np.asarray(scores), kind="stable")
    reach = int(np.searchsorted(np.cumsum(np.asarray(tokens)[order]), volume)) + 1
    return np.sort(order[:max(reach, floor)])
