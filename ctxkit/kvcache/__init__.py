"""KV-cache accounting: what a number of tokens costs a model's KV cache, in bytes.

:mod:`~ctxkit.kvcache.shape` reads a model config (or a preset,
:mod:`~ctxkit.kvcache.presets`) into the per-token shape of its cache;
:mod:`~ctxkit.kvcache.accounting` turns token counts into bytes and reports. Compression,
chat and the evaluation harness use both; :func:`ctxkit.kv_cache_bytes` and
:func:`ctxkit.kv_cache_report` are the public entry points.
"""
