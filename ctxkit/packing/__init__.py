"""Packing: plans on lengths (``plan``, ``optimal``, ``online``), batching, packing token
sequences (``sequences``), collation of a plan to arrays (``tensors``) in a ``PackResult``
(``result``), a ``collate_fn`` (``collator``) and Hugging Face interop (``hf``; ``hf_stream``
for an ``IterableDataset``); ``collate`` re-exports the packing API in one import. The public
functions are re-exported by :mod:`ctxkit` (``ctxkit.pack``, ``ctxkit.pack_lengths``, ...)."""
