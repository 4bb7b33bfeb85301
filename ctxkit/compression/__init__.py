"""Compression to a token budget: scorers, pruning of text, chat histories, density scores."""
