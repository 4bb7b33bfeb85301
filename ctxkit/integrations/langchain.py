"""LangChain and LangGraph adapters: chat histories and retrieved documents under a budget.

- :func:`compress_messages`: LangChain ``BaseMessage``\\ s in, the window
  :func:`~ctxkit.chat.pipeline.compress_chat` keeps out, as the same objects (a shortened
  message is a copy of its class); a tool call and its ``ToolMessage``\\ s stay together and the
  window never starts with a ``ToolMessage``. The query is the last human message unless given.
- :class:`CompressionHook`: the same as a LangGraph ``pre_model_hook``
  (``create_react_agent(model, tools, pre_model_hook=CompressionHook(4096))``). LangGraph calls
  it with the graph state before each model call; it returns ``{"llm_input_messages": window}``,
  the documented key for messages sent to the model without changing the state, so the full
  history stays in the checkpoint. It keeps one
  :class:`~ctxkit.chat.memory.ChatMemory` per thread (``configurable.thread_id``), so a
  step costs the new messages' features, and with ``prefix_cache=True`` consecutive windows
  share their prefix (a provider's prompt cache serves it; ``cache_accounting`` says how much).
- :class:`~ctxkit.integrations.langchain_middleware.CompressionMiddleware` (importable from
  here; it needs the ``langchain`` package, 1.x): the same, per thread, as middleware of
  LangChain 1.x's ``create_agent(model, tools, middleware=[CompressionMiddleware(4096)])``,
  the successor of ``create_react_agent``; it changes what the model is sent on each call
  (``wrap_model_call``), never the agent's state. Both keep their memories in a
  :class:`ThreadMemories`.
- :class:`CtxkitDocumentCompressor`: a ``BaseDocumentCompressor`` for
  ``ContextualCompressionRetriever``: the retrieved documents compressed together to a token
  budget with the question (:func:`~ctxkit.integrations.passages.compress_passages`); each kept
  document keeps its metadata and id and gains ``metadata["ctxkit"]``: its action (kept,
  shortened), tokens before and after, and the input positions of the documents dropped whole.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> chat = [HumanMessage("My locker code is 4417."), AIMessage("Noted."),
    ...         HumanMessage("The weather is sunny with a light breeze today."),
    ...         HumanMessage("What is my locker code?")]
    >>> window = compress_messages(chat, 26, keep_last=1, scorer="idf")
    >>> [m.content for m in window]
    ['My locker code is 4417.', 'What is my locker code?']
    >>> window[0] is chat[0]
    True
"""

# no ``from __future__ import annotations``: LangGraph reads the real annotation of
# ``CompressionHook.__call__``'s ``config`` to decide whether to pass the run's config
from collections.abc import Mapping, Sequence
from typing import Any

from ctxkit.chat.pipeline import compress_chat
from ctxkit.compression.options import CompressOptions
from ctxkit.integrations import missing_extra
from ctxkit.integrations.passages import compress_passages
from ctxkit.integrations.threads import ThreadMemories

try:
    from langchain_core.callbacks import Callbacks
    from langchain_core.documents import Document
    from langchain_core.documents.compressor import BaseDocumentCompressor
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise missing_extra("langchain", "langchain-core") from exc

# CompressionMiddleware is left out: ``import *`` must work without the ``langchain`` package
__all__ = ["CompressionHook", "CtxkitDocumentCompressor", "ThreadMemories", "compress_messages"]

_DEFAULTS = CompressOptions()


def compress_messages(messages: Sequence[BaseMessage], budget: int, *,
                      query: str | None = None, **options: Any) -> list[BaseMessage]:
    """The messages of ``messages`` that :func:`~ctxkit.chat.pipeline.compress_chat` keeps
    under ``budget`` tokens, as LangChain messages (see the module docstring). ``options``:
    ``compress_chat``'s keywords (``keep_last``, ``scorer``, ``options``...); call
    ``compress_chat`` itself for the ledger of what was dropped or shortened.

    Example:
        >>> from langchain_core.messages import SystemMessage, HumanMessage
        >>> compress_messages([SystemMessage("Be brief."), HumanMessage("hi")], 100)[1].content
        'hi'
    """
    return compress_chat(messages, budget, query=query, **options).messages


class CompressionHook(ThreadMemories):
    """A LangGraph ``pre_model_hook`` fitting the state's messages into ``budget`` tokens;
    the arguments and the per-thread memories are :class:`ThreadMemories`'.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> hook = CompressionHook(200, scorer="idf")
        >>> update = hook({"messages": [HumanMessage("hi")]})
        >>> [m.content for m in update["llm_input_messages"]]
        ['hi']
    """

    def __call__(self, state: Any, config: RunnableConfig | None = None) -> dict[str, Any]:
        """``{"llm_input_messages": window}`` for the graph ``state`` (a mapping or an object
        with ``messages``); ``config`` is the run's config (its ``thread_id`` picks the
        memory). LangGraph passes the config to a node only when the parameter is annotated
        ``RunnableConfig``."""
        messages = state["messages"] if isinstance(state, Mapping) else state.messages
        memory = self.sync(self._thread(config), list(messages))
        return {"llm_input_messages": memory.compress().messages}

    @staticmethod
    def _thread(config: RunnableConfig | None) -> Any:
        return ((config or {}).get("configurable") or {}).get("thread_id")


class CtxkitDocumentCompressor(BaseDocumentCompressor):
    """Compress retrieved documents to ``budget`` tokens with the query (see the module
    docstring). ``scorer`` and ``tokenizer`` as for
    :func:`~ctxkit.compression.text.pipeline.compress`;
    ``options`` (a :class:`~ctxkit.compression.options.CompressOptions`) sets the rest, the
    two fields applied on top when the user set them.

    Example:
        >>> from langchain_core.documents import Document
        >>> docs = [Document("Paris is the capital of France.", metadata={"src": "a"}),
        ...         Document("Bananas are yellow fruit of the tropics.", metadata={"src": "b"})]
        >>> out = CtxkitDocumentCompressor(budget=8, scorer="idf").compress_documents(
        ...     docs, "capital of France")
        >>> [(d.page_content, d.metadata["src"], d.metadata["ctxkit"]["passages_dropped"])
        ...  for d in out]
        [('Paris is the capital of France.', 'a', [1])]
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    budget: int
    scorer: Any = _DEFAULTS.scorer
    tokenizer: Any = _DEFAULTS.tokenizer
    options: Any = None

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> list[Document]:
        """The documents that fit, in their order, shortened where needed."""
        opts = CompressOptions.from_call(self.options, {  # the fields the user set win
            k: getattr(self, k) for k in ("scorer", "tokenizer") if k in self.model_fields_set})
        docs = list(documents)
        res = compress_passages([d.page_content for d in docs], self.budget, query=query,
                                options=opts)
        dropped = res.dropped
        out = []
        for i, text in zip(res.kept, res.texts):
            meta = {**docs[i].metadata, "ctxkit": res.passages[i].to_metadata(dropped)}
            out.append(docs[i].model_copy(update={"page_content": text, "metadata": meta}))
        return out


def __getattr__(name: str) -> Any:
    # CompressionMiddleware needs the ``langchain`` package (1.x) on top of langchain-core:
    # imported on first use, so the rest of this module works with langchain-core alone
    if name == "CompressionMiddleware":
        from ctxkit.integrations.langchain_middleware import CompressionMiddleware

        return CompressionMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
