"""LlamaIndex adapters: retrieved nodes under a token budget, and ChatMemory as chat memory.

- :class:`CtxkitNodePostprocessor`: a ``BaseNodePostprocessor``
  (``index.as_query_engine(node_postprocessors=[CtxkitNodePostprocessor(budget=1024)])``). The
  nodes' text is compressed together to ``budget`` tokens with the query bundle's query string
  (:func:`~ctxkit.integrations.passages.compress_passages`): the most relevant nodes stay whole,
  the next are shortened, the rest dropped. A kept node is a copy with its id, metadata and
  score, and ``metadata["ctxkit"]`` saying what happened (hidden from the LLM and the embedder
  through the node's excluded metadata keys), including the positions of the nodes dropped.
- :class:`CtxkitMemory`: a ``BaseMemory`` on :class:`~ctxkit.chat.memory.ChatMemory`,
  accepted by chat engines (``SimpleChatEngine.from_defaults(memory=CtxkitMemory.from_defaults(
  budget=4096))``). ``put`` adds a ``ChatMessage``; ``get`` returns the window ChatMemory
  selects for the latest user turn (or ``input``) within the budget, less
  ``initial_token_count`` (the engine's prefix messages, counted with :attr:`tokenizer_fn`), as
  ``ChatMessage``\\ s (untouched ones the very objects put); ``get_all`` the whole history.
  With ``prefix_cache=True`` consecutive windows share their prefix, and
  :meth:`CtxkitMemory.cache_accounting` says what they would be billed.

Example:
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> memory = CtxkitMemory.from_defaults(budget=100, scorer="idf")
    >>> memory.put(ChatMessage(role="user", content="My locker code is 4417."))
    >>> [m.content for m in memory.get()]
    ['My locker code is 4417.']
"""

from __future__ import annotations

from typing import Any

from ctxkit import validate
from ctxkit.chat.billing import CacheAccountingResult
from ctxkit.chat.memory import ChatMemory
from ctxkit.compression.options import CompressOptions
from ctxkit.integrations import missing_extra
from ctxkit.integrations.passages import compress_passages
from ctxkit.io.tokenizers import resolve_tokenizer

try:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.memory.types import BaseMemory
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise missing_extra("llamaindex", "llama-index-core") from exc

__all__ = ["CtxkitMemory", "CtxkitNodePostprocessor"]

_DEFAULTS = CompressOptions()
_KEY = "ctxkit"
_DEFAULT_BUDGET = 4096  # ChatMemory's default
_ENGINE_RESERVE = 256  # what chat engines leave of an LLM's context window for the reply


class CtxkitNodePostprocessor(BaseNodePostprocessor):
    """Compress retrieved nodes to ``budget`` tokens with the query (see the module docstring).
    ``scorer`` and ``tokenizer`` as for :func:`~ctxkit.compression.text.pipeline.compress`;
    ``options`` (a :class:`~ctxkit.compression.options.CompressOptions`) sets the rest, the
    two fields applied on top when the user set them.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> nodes = [NodeWithScore(node=TextNode(text="Paris is the capital of France."),
        ...                        score=0.9),
        ...          NodeWithScore(node=TextNode(text="Bananas are yellow fruit."), score=0.4)]
        >>> out = CtxkitNodePostprocessor(budget=8, scorer="idf").postprocess_nodes(
        ...     nodes, query_str="capital of France")
        >>> [(n.node.get_content(), n.score) for n in out]
        [('Paris is the capital of France.', 0.9)]
    """

    budget: int = Field(gt=0, description="tokens the kept nodes' text may take in all")
    scorer: Any = Field(default=_DEFAULTS.scorer, description="compress's scorer")
    tokenizer: Any = Field(default=_DEFAULTS.tokenizer, description="tokenizer counting")
    options: Any = Field(default=None, description="a CompressOptions for the other options")

    @classmethod
    def class_name(cls) -> str:
        return "CtxkitNodePostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        opts = CompressOptions.from_call(self.options, {  # the fields the user set win
            k: getattr(self, k) for k in ("scorer", "tokenizer") if k in self.model_fields_set})
        query = query_bundle.query_str if query_bundle is not None else None
        res = compress_passages([n.node.get_content(metadata_mode=MetadataMode.NONE)
                                 for n in nodes], self.budget, query=query, options=opts)
        dropped = res.dropped
        out = []
        for i, text in zip(res.kept, res.texts):
            node = nodes[i].node
            copy = node.model_copy(update={
                "metadata": {**node.metadata, _KEY: res.passages[i].to_metadata(dropped)},
                "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, _KEY],
                "excluded_embed_metadata_keys": [*node.excluded_embed_metadata_keys, _KEY]})
            if text != node.get_content(metadata_mode=MetadataMode.NONE):
                copy.set_content(text)
            out.append(NodeWithScore(node=copy, score=nodes[i].score))
        return out


class CtxkitMemory(BaseMemory):
    """LlamaIndex chat memory on a :class:`~ctxkit.chat.memory.ChatMemory` (see the
    module docstring). Build it with :meth:`from_defaults`.

    Example:
        >>> memory = CtxkitMemory.from_defaults(budget=50, scorer="idf", prefix_cache=True)
        >>> memory.set([ChatMessage(role="user", content=f"Fact {i}: the code is {i}{i}.")
        ...             for i in range(10)])
        >>> window = memory.get()
        >>> len(memory.get_all()), window[-1].content
        (10, 'Fact 9: the code is 99.')
    """

    budget: int = Field(default=_DEFAULT_BUDGET, gt=0, description="tokens of a window")
    memory_options: dict = Field(default_factory=dict,
                                 description="ChatMemory's keywords (prefix_cache too)")
    _memory: ChatMemory = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._memory = self._new()

    @classmethod
    def class_name(cls) -> str:
        return "CtxkitMemory"

    @classmethod
    def from_defaults(cls, chat_history: list[ChatMessage] | None = None, llm: Any = None,
                      token_limit: int | None = None, *, budget: int | None = None,
                      **options: Any) -> CtxkitMemory:
        """A memory of ``budget`` tokens (else ``token_limit``, as chat engines pass it; else
        the LLM's context window less 256 tokens for the reply, as they compute it; else
        4096) holding ``chat_history``; ``options``: ChatMemory's keywords."""
        if budget is None:
            budget = token_limit
        if budget is None and llm is not None:
            budget = llm.metadata.context_window - _ENGINE_RESERVE
        memory = cls(budget=_DEFAULT_BUDGET if budget is None else budget,
                     memory_options=options)
        if chat_history:
            memory.set(chat_history)
        return memory

    @property
    def memory(self) -> ChatMemory:
        """The ChatMemory underneath."""
        return self._memory

    @property
    def tokenizer_fn(self) -> Any:
        """The tokenizer's ``encode`` (chat engines count their prefix messages with it)."""
        return resolve_tokenizer(self._memory.options.tokenizer).encode

    def get(self, input: str | None = None, initial_token_count: int = 0,
            **kwargs: Any) -> list[ChatMessage]:
        """The window to send: ChatMemory's selection for ``input`` (default: the latest user
        turn) within ``budget - initial_token_count`` tokens."""
        validate.non_negative_int(initial_token_count, "initial_token_count")
        budget = self.budget - initial_token_count
        if budget < 1:
            raise ValueError(f"initial_token_count {initial_token_count} leaves no room in the "
                             f"budget of {self.budget} tokens")
        return list(self._memory.compress(input or None, budget=budget).messages)

    def get_all(self) -> list[ChatMessage]:
        """Every message put, as put."""
        return list(self._memory.history.originals)

    def put(self, message: ChatMessage) -> None:
        """Add a message."""
        self._memory.add(message)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the history with ``messages``."""
        memory = self._new()
        memory.extend(messages)
        self._memory = memory

    def reset(self) -> None:
        """Forget the history."""
        self._memory = self._new()

    def cache_accounting(self) -> CacheAccountingResult:
        """Prompt-cache accounting of the windows :meth:`get` returned
        (:meth:`~ctxkit.chat.memory.ChatMemory.cache_accounting`)."""
        return self._memory.cache_accounting()

    def _new(self) -> ChatMemory:
        return ChatMemory(self.budget, **self.memory_options)
