"""Compression of one text or a list of chunks to a token budget: units (sentences, chunks and
the fallback units of unpunctuated text), their selection under the budget, multi-hop links
between chunks, and word pruning inside kept units. :func:`ctxkit.compress` is the entry point
(``pipeline``)."""
