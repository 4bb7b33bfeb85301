"""Per-thread chat memories for the framework adapters: one :class:`~ctxkit.ChatMemory` per
conversation thread, kept in step with the thread's history as the framework hands it over."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ctxkit import validate
from ctxkit.chat.billing import CacheAccountingResult
from ctxkit.chat.memory import ChatMemory

__all__ = ["ThreadMemories"]


class ThreadMemories:
    """One :class:`~ctxkit.chat.memory.ChatMemory` per conversation thread, kept in step with
    the thread's history: what :class:`~ctxkit.integrations.langchain.CompressionHook` and
    :class:`~ctxkit.integrations.langchain_middleware.CompressionMiddleware` share.

    ``prefix_cache``: as for :class:`~ctxkit.chat.memory.ChatMemory` (``True`` or a
    :class:`~ctxkit.chat.prefix_window.PrefixCacheOptions`); ``options``: ChatMemory's
    keywords. ``threads``: memories kept, least recently used dropped first. A history that is
    not the previous one plus new messages (edited, or messages removed) starts its thread's
    memory afresh.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> threads = ThreadMemories(200, scorer="idf")
        >>> len(threads.sync("t1", [HumanMessage("hi")])), len(threads.memory("t1"))
        (1, 1)
    """

    def __init__(self, budget: int, *, prefix_cache: Any = False, threads: int = 64,
                 **options: Any):
        validate.positive_int(threads, "threads")
        self.budget = budget
        self._make = lambda: ChatMemory(budget, prefix_cache=prefix_cache, **options)
        self._make()  # a bad option is an error now, not at the first model call
        self._threads = threads
        self._memories: OrderedDict[Any, ChatMemory] = OrderedDict()

    def memory(self, thread_id: Any = None) -> ChatMemory:
        """The memory of a thread (``None``: runs without a ``thread_id``)."""
        if thread_id not in self._memories:
            raise KeyError(f"no messages seen for thread {thread_id!r}")
        return self._memories[thread_id]

    def cache_accounting(self, thread_id: Any = None) -> CacheAccountingResult:
        """Prompt-cache accounting of the windows sent on a thread
        (:meth:`~ctxkit.chat.memory.ChatMemory.cache_accounting`)."""
        return self.memory(thread_id).cache_accounting()

    def sync(self, thread: Any, messages: list[Any]) -> ChatMemory:
        """The thread's memory holding ``messages``: the new ones added, or a fresh memory
        when the history is not the one seen before plus new messages."""
        memory = self._memories.pop(thread, None)
        if memory is not None:
            seen = memory.history.originals
            if len(messages) < len(seen) or any(
                    a is not b and a != b for a, b in zip(seen, messages)):
                memory = None
        if memory is None:
            memory = self._make()
        memory.extend(messages[len(memory):])
        self._memories[thread] = memory
        while len(self._memories) > self._threads:
            self._memories.popitem(last=False)
        return memory
