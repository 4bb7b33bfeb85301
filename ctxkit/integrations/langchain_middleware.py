"""LangChain 1.x agent middleware: every model call of a ``create_agent`` agent under a budget.

:class:`CompressionMiddleware` goes in ``create_agent(model, tools, middleware=[...])``
(``langchain.agents``, the agent that replaces LangGraph's deprecated ``create_react_agent``).
Before each model call it sends the model the window a
:class:`~ctxkit.chat.memory.ChatMemory` keeps of the system prompt and the messages: a tool
call and its ``ToolMessage``\\ s stay together, the window never starts with a
``ToolMessage``, the system prompt is kept whole (``keep_system``, on by default) and counts
in the budget, and untouched messages are the very objects.

It implements ``wrap_model_call`` (and ``awrap_model_call``) and hands the model
``request.override(messages=..., system_message=...)``: LangChain's pattern for a change to
what the model sees on one call (its ``ContextEditingMiddleware`` trims tool results that way).
The agent's state, and so its checkpoint, keeps the whole history. A ``before_model`` hook
would instead rewrite the state (``RemoveMessage(REMOVE_ALL_MESSAGES)`` then the kept
messages, as ``SummarizationMiddleware`` does): a message dropped for one question would be
gone for every later one, while ctxkit picks each window for the question at hand.

Memories are per thread (the run's ``thread_id``): a step costs its new messages' features,
and with ``prefix_cache=True`` consecutive windows share their prefix
(:meth:`~ctxkit.integrations.langchain.ThreadMemories.cache_accounting` says how much a
provider's prompt cache serves). The budget counts messages as
:func:`~ctxkit.count_chat_tokens` does; the tools' schemas the model is also sent are not in
it. Put the middleware after any that changes the messages or the system prompt
(``middleware=[...]`` runs first to last, outermost first), so it sees what the model gets.

Example:
    >>> from langchain.agents import create_agent
    >>> from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> chat = [HumanMessage("My locker code is 4417."), AIMessage("Noted.")]
    >>> chat += [HumanMessage(f"Shelf {i} holds jars of plum jam.") for i in range(30)]
    >>> middleware = CompressionMiddleware(30, scorer="idf", keep_last=1)
    >>> agent = create_agent(GenericFakeChatModel(messages=iter([AIMessage("4417.")])),
    ...                      system_prompt="Answer briefly.", middleware=[middleware])
    >>> state = agent.invoke({"messages": chat + [HumanMessage("What is my locker code?")]})
    >>> state["messages"][-1].content, len(state["messages"])  # the state keeps everything
    ('4417.', 34)
    >>> [m.content for m in middleware.memory().peek().messages]  # what the model was sent
    ['Answer briefly.', 'locker 4417', 'What is my locker code?']
"""

from collections.abc import Awaitable, Callable
from typing import Any

from ctxkit.integrations import missing_extra
from ctxkit.integrations.threads import ThreadMemories

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise missing_extra("langchain", "langchain>=1.0") from exc

__all__ = ["CompressionMiddleware"]


class CompressionMiddleware(ThreadMemories, AgentMiddleware):
    """``create_agent`` middleware sending the model ``budget`` tokens of the system prompt
    and messages (see the module docstring); the arguments and the per-thread memories are
    :class:`~ctxkit.integrations.langchain.ThreadMemories`' (``prefix_cache``, ``threads``,
    ChatMemory's keywords: ``keep_last``, ``scorer``...)."""

    def wrap_model_call(self, request: ModelRequest,
                        handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        """Call the model on the window instead of the whole history."""
        return handler(self.compress_request(request))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
                               ) -> Any:
        """:meth:`wrap_model_call` for ``ainvoke`` and ``astream``."""
        return await handler(self.compress_request(request))

    def compress_request(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the window as its messages and system message; the memory of the
        run's thread advances by one window sent."""
        system = request.system_message
        history = ([system] if system is not None else []) + list(request.messages)
        out = self.sync(_thread_id(request.runtime), history).compress()
        window = list(out.messages)
        if system is not None:  # message 0, when kept, leads the window (a summary follows)
            system = window.pop(0) if out.kept[:1] == [0] else None
        return request.override(messages=window, system_message=system)


def _thread_id(runtime: Any) -> Any:
    """The run's ``thread_id`` (``None`` without one): LangGraph's ``execution_info`` where
    the runtime has it, else the config of the run in progress."""
    info = getattr(runtime, "execution_info", None)
    if info is not None:
        return info.thread_id
    from langgraph.config import get_config

    try:
        config = get_config()
    except RuntimeError:  # called outside a graph run
        return None
    return (config.get("configurable") or {}).get("thread_id")
