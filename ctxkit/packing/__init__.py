"""Packing: plans on lengths (``plan``, ``optimal``, ``online``), batching, collation to
tensors (``collate``) and Hugging Face interop (``hf``). The public functions are re-exported
by :mod:`ctxkit` (``ctxkit.pack``, ``ctxkit.pack_lengths``, ...)."""
