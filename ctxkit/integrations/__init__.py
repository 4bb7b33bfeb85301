"""LangChain / LangGraph and LlamaIndex adapters (the ``langchain`` and ``llamaindex`` extras).

- :mod:`ctxkit.integrations.langchain`: :func:`~ctxkit.integrations.langchain.compress_messages`
  (``BaseMessage``\\ s to ``BaseMessage``\\ s under a budget),
  :class:`~ctxkit.integrations.langchain.CompressionHook` (a LangGraph ``pre_model_hook``),
  :class:`~ctxkit.integrations.langchain_middleware.CompressionMiddleware` (LangChain 1.x
  ``create_agent`` middleware; the ``langchain`` package, imported on first use) and
  :class:`~ctxkit.integrations.langchain.CtxkitDocumentCompressor` (a
  ``BaseDocumentCompressor`` for ``ContextualCompressionRetriever``);
- :mod:`ctxkit.integrations.llamaindex`:
  :class:`~ctxkit.integrations.llamaindex.CtxkitNodePostprocessor` (a
  ``BaseNodePostprocessor``) and :class:`~ctxkit.integrations.llamaindex.CtxkitMemory` (a
  ``BaseMemory`` on :class:`~ctxkit.chat.memory.ChatMemory` for chat engines);
- :mod:`ctxkit.integrations.passages`: the framework-free step both retriever adapters share.

Importing an adapter without its framework is an ``ImportError`` that names the extra.

Example:
    >>> str(missing_extra("langchain", "langchain-core"))
    "ctxkit.integrations.langchain needs langchain-core: pip install 'ctxkit[langchain]'"
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(extra: str, package: str) -> ImportError:
    """The error an adapter raises when its framework (``package``, in the ``extra``) is not
    installed."""
    return ImportError(f"ctxkit.integrations.{extra} needs {package}: "
                       f"pip install 'ctxkit[{extra}]'")
