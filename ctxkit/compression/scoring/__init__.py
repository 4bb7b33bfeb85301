"""Scoring of units for compression: the :class:`~ctxkit.compression.scoring.base.Scorer`
protocol and its registry, lexical relevance (BM25, TF-IDF), per-word information (idf, lm),
and the model-backed relevance scorers (embedding, cross-encoder) with their shortlist and
cache."""
