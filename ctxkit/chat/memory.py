"""A rolling context for chat applications: add a turn, get a window that fits the budget.

:class:`ChatMemory` is :func:`~ctxkit.chat.pipeline.compress_chat` made incremental. It holds
the whole conversation and, beside it, a feature store (:class:`ChatFeatures`) keyed by message
content: token counts, self-information, shingles, the scorer's embeddings and pruned renderings
are computed once per message and reused. A call to :meth:`ChatMemory.compress` after one new
message therefore costs that message's features plus the selection, not the whole history, and
returns what ``compress_chat`` returns on the same history with the same options (with a
model-backed scorer, embeddings computed in different batches can differ in their last bits,
so a window can differ only at a near tie of scores):

- the system prompt and the last ``keep_last`` turns are the attention sinks and the rolling
  buffer, always kept verbatim;
- every older turn is evicted or kept by importance to the latest user turn (or ``query``):
  the most relevant whole, the next shortened, the rest dropped, each change in the ledger.

With ``prefix_cache=True`` (or a :class:`~ctxkit.chat.prefix_window.PrefixCacheOptions`)
the window only grows at its end between compactions, so a provider's prompt cache serves
most of it every turn; the older turns the latest question needs are recalled into a small
block just before the latest user message (:mod:`ctxkit.chat.prefix_window`).
With ``summarize`` (a callable ``(evicted_messages, previous_summary) -> str``), evicted turns
are folded into a running summary, one message after the system prompt
(:mod:`ctxkit.chat.summary_placement`): in prefix-cache mode rewritten at each compaction, else
once the turns evicted since the last rewrite hold ``summary_options.refresh`` of the budget.
:meth:`ChatMemory.peek` returns the window without sending it (no state advanced).
:meth:`ChatMemory.cache_accounting` says what the windows returned so far would be billed.

:meth:`ChatMemory.to_dict` / :meth:`ChatMemory.from_dict` give a JSON-safe snapshot (messages and
options, not the cache), so a server can keep one memory per session and restore it; the first
``compress`` after a restore recomputes the features once. A snapshot names only built-in
tokenizers and scorers unless the restoring caller allows more: it is data, not a choice of
the models a server loads.

Example:
    >>> mem = ChatMemory(budget=60, keep_last=1, scorer="idf")
    >>> mem.add({"role": "system", "content": "You are terse."})
    >>> mem.extend([{"role": "user", "content": "My locker code is 4417."},
    ...             {"role": "assistant", "content": "Noted."},
    ...             {"role": "user", "content": "The weather is sunny with a light breeze."},
    ...             {"role": "user", "content": "What is my locker code?"}])
    >>> len(mem)
    5
    >>> window = mem.compress()
    >>> window.compressed_tokens <= 60 and "4417" in window.messages[1]["content"]
    True
    >>> ChatMemory.from_dict(mem.to_dict()).compress().messages == window.messages
    True
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from ctxkit import validate
from ctxkit.chat.billing import CacheAccountingResult, CacheMeter
from ctxkit.chat.features import ChatFeatures, MessageTable
from ctxkit.chat.history import HistoryFormat
from ctxkit.chat.options import ChatOptions
from ctxkit.chat.prefix_window import PrefixCacheOptions, PrefixWindow
from ctxkit.chat.result import CompressChatResult
from ctxkit.chat.selection import select
from ctxkit.chat.summary_placement import (
    Summarizer,
    SummaryOptions,
    SummaryState,
    check_summarizer,
    summarized_select,
)
from ctxkit.chat.vectors import restore_vectors, snapshot_vectors
from ctxkit.compression.options import check_budget
from ctxkit.compression.scoring.registry import available_scorers
from ctxkit.compression.scoring.shortlist import CANDIDATE_FLOOR
from ctxkit.errors import InputError
from ctxkit.io.messages import ToolPairing
from ctxkit.io.messages import message_format as _format
from ctxkit.io.messages import message_text as _text
from ctxkit.options import bad_option, takes_options

__all__ = ["ChatMemory"]

_VERSION = 1


def _snapshot_spec(kind: str, spec: Any, given: Any, allowed: frozenset[str]) -> Any:
    """The tokenizer or scorer a restored memory uses: ``given`` (the caller's), else the
    snapshot's ``spec`` when it is built in or ``allowed`` (see :meth:`ChatMemory.from_dict`).
    """
    if given is not None:
        return given
    if not isinstance(spec, str):
        raise InputError(f"snapshot field {kind!r} must be a name, got {type(spec).__name__}")
    names_path = spec.startswith("hf:") if kind == "tokenizer" else ":" in spec
    if names_path and spec not in allowed:
        raise InputError(f"snapshot field {kind!r} is {spec!r}, which loads a model from a "
                         f"path; a snapshot may name only built-in {kind}s: pass {kind}= (the "
                         f"{kind} to use) or allow=[{spec!r}] to ChatMemory.from_dict")
    return spec


class ChatMemory:
    """A conversation plus the per-message features that make compressing it cheap per turn.

    ``budget``, ``options`` and the keywords as in :func:`~ctxkit.chat.pipeline.compress_chat`
    (a :class:`~ctxkit.chat.options.ChatOptions`, with every option keyword given applied on
    top). ``summarize`` and ``summary_options``: the running summary of
    evicted turns (see the module docstring).
    """

    @takes_options(ChatOptions)
    def __init__(self, budget: int = 4096, *, options: ChatOptions,
                 prefix_cache: bool | PrefixCacheOptions = False,
                 summarize: Summarizer | None = None,
                 summary_options: SummaryOptions | None = None):
        self.budget = check_budget(budget)
        self.options = options
        tokenizer, scorer = self.options.tokenizer, self.options.scorer
        self.features = ChatFeatures(tokenizer, scorer)
        if prefix_cache is True:
            prefix_cache = PrefixCacheOptions()
        if prefix_cache is not False and not isinstance(prefix_cache, PrefixCacheOptions):
            raise bad_option("prefix_cache", " must be True, False or a PrefixCacheOptions, "
                                             f"got {prefix_cache!r}")
        self.prefix_cache = prefix_cache or None
        check_summarizer(summarize)
        self.summarize = summarize
        self.summary_options = SummaryOptions.resolve(summary_options)
        self._summary = SummaryState()  # the running summary without a prefix cache
        self._window = None if self.prefix_cache is None else PrefixWindow(
            self.options, self.features, cache=self.prefix_cache, summarize=summarize,
            summary_options=self.summary_options)
        self.meter = CacheMeter(tokenizer=self.features.tok,
                                per_message=self.options.per_message,
                                reply_priming=self.options.reply_priming,
                                ttl=None if self.prefix_cache is None else self.prefix_cache.ttl)
        self._added_at: float | None = None  # the time given with the latest message
        self.messages: list[dict[str, Any]] = []  # the internal form (OpenAI or ShareGPT)
        self._prepared: int | None = None  # messages[:_prepared] have their features
        self._tools = ToolPairing()  # the calls made so far: a result must answer one
        self._table: MessageTable | None = None  # the selection's per-message facts
        self.history = HistoryFormat()  # the messages as added, and their format
        self._names = (
            tokenizer if isinstance(tokenizer, str) else getattr(tokenizer, "name", None),
            scorer if isinstance(scorer, str) else None)

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, message: Any, *, at: float | None = None) -> None:
        """Append one message in the format of the ones before it: OpenAI, ShareGPT,
        Anthropic, a LangChain ``BaseMessage`` or a LlamaIndex ``ChatMessage``
        (:mod:`ctxkit.io.formats`); windows come back in that format and types. ``at``: when
        it was written (seconds), the time the next window is sent at unless
        :meth:`compress` is given one (see ``PrefixCacheOptions.ttl``)."""
        if at is not None:
            at = validate.finite_number(at, "at")
        msg, kind = self.history.convert(message, len(self.messages))
        _format(self.messages[-1:] + [msg])  # same format as the history, known keys
        _text(msg, len(self.messages))  # content must be text or text parts
        self._tools.add(len(self.messages), msg)  # a result answers a call made before it
        self.history.append(message, kind)
        self.messages.append(msg)
        if at is not None:
            self._added_at = at

    def remove(self, index: int) -> Any:
        """Remove the message at ``index`` (as :meth:`add` numbered it) and return it as it
        was added. A tool call cannot go while results answering it stay: remove those first.

        Example:
            >>> mem = ChatMemory(budget=64, scorer="idf")
            >>> mem.extend([{"role": "user", "content": "hi"},
            ...             {"role": "user", "content": "oops, wrong chat"}])
            >>> mem.remove(-1)["content"], len(mem)
            ('oops, wrong chat', 1)
        """
        if isinstance(index, bool) or not isinstance(index, int) or not \
                -len(self.messages) <= index < len(self.messages):
            raise InputError(f"no message {index!r} to remove: the memory holds "
                             f"{len(self.messages)}")
        index %= len(self.messages)
        rest = self.messages[:index] + self.messages[index + 1:]
        pairing = ToolPairing()
        try:
            for i, m in enumerate(rest):
                pairing.add(i + (i >= index), m)  # numbered as the caller knows them
        except InputError as exc:
            raise InputError(f"message {index} cannot go: {exc}; remove those results "
                             "first") from None
        del self.messages[index]
        self._tools = pairing
        self._table = None  # numbered anew at the next call
        if self._prepared is not None:
            self._prepared = min(self._prepared, index)
        if self._window is not None:
            self._window.reset()
        return self.history.originals.pop(index)

    def extend(self, messages: Iterable[Any]) -> None:
        """Append messages in order."""
        for m in messages:
            self.add(m)

    def compress(self, query: str | None = None, *, budget: int | None = None,
                 at: float | None = None) -> CompressChatResult:
        """The window to send now: ``compress_chat(self.messages, budget, ...)``, from cache;
        with ``prefix_cache``, the prefix-cache-friendly window of
        :class:`~ctxkit.chat.prefix_window.PrefixWindow`.

        ``budget`` overrides the memory's budget for this call. Each call counts as a window
        sent in :meth:`cache_accounting`. ``at``: when it is sent (seconds; default the time
        given with the latest message, else, when the prefix cache has a ``ttl``, the clock),
        which decides whether the provider's cache has expired.

        Example:
            >>> mem = ChatMemory(budget=120, scorer="idf", prefix_cache=PrefixCacheOptions(ttl=300))
            >>> for i in range(12):
            ...     mem.add({"role": "user", "content": f"Crate {i} holds {i * 7} bolts."},
            ...             at=i * 3600)  # an hour apart: each window finds the cache expired
            ...     _ = mem.compress()
            >>> mem.cache_accounting().expired
            11
        """
        at = self._time(at)
        out = self._compress(query, budget, advance=True, at=at)
        # on the internal form: rendered as an OpenAI-style API sends it
        self.meter.record(out, at=at)
        # an edited history leaves features of vanished texts behind: bound the store
        if len(self.features) > 4 * len(self.messages) + 64:
            self.features.retain([_text(m, i) for i, m in enumerate(self.messages)])
        return self.history.restore(out, self.messages)

    def peek(self, query: str | None = None, *, budget: int | None = None,
             at: float | None = None) -> CompressChatResult:
        """The window :meth:`compress` would return now, without sending it: not counted in
        :meth:`cache_accounting`, the prefix and the summary left as they are.

        Example:
            >>> mem = ChatMemory(budget=64, scorer="idf")
            >>> mem.add({"role": "user", "content": "hi"})
            >>> mem.peek().messages == mem.compress().messages
            True
        """
        return self.history.restore(self._compress(query, budget, advance=False,
                                                   at=self._time(at)), self.messages)

    def _time(self, at: float | None) -> float | None:
        """When a window is sent: ``at``, else the latest message's time, else the clock when
        a cache lifetime makes time matter."""
        if at is not None:
            return validate.finite_number(at, "at")
        if self._added_at is not None:
            return self._added_at
        return time.time() if self.meter.ttl is not None else None

    def _compress(self, query: str | None, budget: int | None, advance: bool,
                  at: float | None = None) -> CompressChatResult:
        validate.optional_text(query, "query")
        if budget is not None:
            validate.positive_int(budget, "budget")
        budget = self.budget if budget is None else budget
        self._prepare()
        if self._window is not None:
            act = self._window.compress if advance else self._window.peek
            return act(self.messages, budget, query, at=at)
        if self.summarize is None:
            return select(self.messages, budget, self.options, self.features, query,
                          self._message_table())
        out, state = summarized_select(select, self.messages, budget, self.options,
                                       self.features, query, self.summarize,
                                       self.summary_options, self._summary)
        if advance:
            self._summary = state
        return out

    def _message_table(self) -> MessageTable:
        """The selection's per-message facts, extended by the messages added since the last
        call (built afresh when the stored messages were edited in place)."""
        table = self._table
        if table is None or len(table) > len(self.messages) or \
                table.messages != self.messages[:len(table)]:
            self._table = None
        if self._table is None:
            self._table = MessageTable(self.features, self.options.per_message,
                                       self.options.image_tokens, self.options.word_keep)
        self._table.extend(self.messages[len(self._table):])
        return self._table

    def _prepare(self) -> None:
        """The steady state: features of the messages added since the last call, in one batch.
        A first call on a long history (restored, or added at once) is a cold call, as
        ``compress_chat`` is: the shortlist embeds what its question needs, and the next call
        prepares the rest."""
        if self._prepared is None:
            self._prepared = 0
            if len(self.messages) > CANDIDATE_FLOOR:
                return
        new = self.messages[self._prepared:]
        if new:
            self.features.prepare([_text(m, self._prepared + k) for k, m in enumerate(new)],
                                  self.options.word_keep)
            if self._table is not None and len(self._table) > self._prepared:
                self._table = None  # its rows before now lack their pruned lengths
            self._prepared = len(self.messages)

    def cache_accounting(self) -> CacheAccountingResult:
        """Prompt-cache accounting of every window :meth:`compress` returned: per turn the
        tokens of the prefix identical to the previous window's, the uncached tokens, and
        billed input at a cached-price ratio (:mod:`ctxkit.chat.billing`).

        Example:
            >>> mem = ChatMemory(budget=400, scorer="idf", prefix_cache=True)
            >>> for i in range(6):
            ...     mem.add({"role": "user", "content": f"Question {i} about the parcel?"})
            ...     _ = mem.compress()
            >>> acc = mem.cache_accounting()
            >>> len(acc.turns), acc.turns[-1].cached_messages
            (6, 5)
        """
        return self.meter.result()

    def kv_cache(self, model: Any, *, dtype: str = "bfloat16", query: str | None = None,
                 budget: int | None = None) -> Any:
        """KV-cache memory of the whole conversation and of the window :meth:`compress` returns
        now, for ``model`` (a preset name, ``config.json``, model directory or config dict): a
        :class:`~ctxkit.kvcache.accounting.KVCacheChange`. It compresses, which after the
        window was just computed costs the selection only (the features are cached).

        Example:
            >>> mem = ChatMemory(budget=40, keep_last=1, scorer="idf")
            >>> mem.extend([{"role": "user", "content": "Tell me about tides. " * 20},
            ...             {"role": "user", "content": "Thanks."}])
            >>> kv = mem.kv_cache("llama-3.1-8b")
            >>> kv.after.bytes == mem.compress().compressed_tokens * 131072 < kv.before.bytes
            True
        """
        return self.compress(query, budget=budget).kv_cache(model, dtype=dtype)

    @property
    def summary_state(self) -> SummaryState:
        """The running summary of evicted turns (text and covered indices) so far."""
        return self._summary if self._window is None else self._window.summary_state

    def to_dict(self, *, vectors: bool = False) -> dict[str, Any]:
        """A JSON-safe snapshot: messages, budget and options (scorer and tokenizer by name),
        and the running summary when there is one (not the summarizer: pass it to
        :meth:`from_dict`). LangChain, LlamaIndex and Anthropic messages are stored in the
        internal OpenAI form. ``vectors=True`` adds the embedding scorer's vectors of every
        message (:mod:`ctxkit.chat.vectors`: about 4 KB a message), so :meth:`from_dict`
        does not embed the history again."""
        tokenizer, scorer = self._names
        if scorer is None:
            scorer = getattr(self.features.scorer, "name", None)
            if scorer not in available_scorers():
                raise InputError("to_dict needs a scorer given by name (or a registered one); "
                                 f"got {self.features.scorer!r}")
        if tokenizer is None:
            raise InputError("to_dict needs a tokenizer given by name")
        return {"version": _VERSION, "budget": self.budget, "tokenizer": tokenizer,
                "scorer": scorer, "options": {k: v for k, v in self.options.to_dict().items()
                                              if k not in ("tokenizer", "scorer")},
                "prefix_cache": None if self.prefix_cache is None else
                self.prefix_cache.to_dict(),
                "messages": [dict(m) for m in self.messages],
                **({"summary": {"text": state.text, "covers": sorted(state.covers),
                                "options": self.summary_options.to_dict()}}
                   if (state := self.summary_state).text is not None else {}),
                **({"vectors": snapshot_vectors(self.features.scorer, self._texts())}
                   if vectors else {})}

    def _texts(self) -> list[str]:
        """The distinct non-empty message texts, in order: what the vectors are of."""
        return [t for t in dict.fromkeys(_text(m, i) for i, m in enumerate(self.messages)) if t]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, summarize: Summarizer | None = None,
                  tokenizer: Any = None, scorer: Any = None, allow: Iterable[str] = ()
                  ) -> ChatMemory:
        """Rebuild a memory from :meth:`to_dict` output (features are recomputed lazily);
        ``summarize``: the summarizer to go on with (the running summary is restored).

        A snapshot carries data; what it may load is the caller's choice, since a server
        restores snapshots its clients sent. The snapshot's ``tokenizer`` and ``scorer`` are
        used only when they are built in: a tokenizer name other than ``hf:<dir>`` (e.g.
        ``cl100k_base``, ``minilm``) and a scorer name with no ``:<dir>`` (e.g. ``idf``,
        ``cross-encoder``, a registered or plugin name). A spec naming a path is an
        :class:`~ctxkit.errors.InputError` unless it is in ``allow`` (exact specs the caller
        trusts) or the caller gives ``tokenizer=`` / ``scorer=`` (an object or a name, used
        instead of the snapshot's).

        A damaged snapshot (a missing field, a field of the wrong type, a truncated message
        list) is an :class:`~ctxkit.errors.InputError` naming the field.

        Example:
            >>> mem = ChatMemory(budget=64, scorer="idf")
            >>> mem.add({"role": "user", "content": "hi"})
            >>> len(ChatMemory.from_dict(mem.to_dict()))
            1
        """
        if not isinstance(data, Mapping):
            raise InputError(f"snapshot must be a mapping from ChatMemory.to_dict, got "
                             f"{type(data).__name__}")
        if data.get("version") != _VERSION:
            raise InputError(f"snapshot field 'version' must be {_VERSION}, got "
                             f"{data.get('version')!r}")
        missing = [k for k in ("budget", "tokenizer", "scorer", "options", "messages")
                   if k not in data]
        if missing:
            raise InputError(f"snapshot lacks field(s) {', '.join(map(repr, missing))}")
        options, messages = data["options"], data["messages"]
        if not isinstance(options, Mapping):
            raise InputError(f"snapshot field 'options' must be a mapping, got "
                             f"{type(options).__name__}")
        if "keep_last" not in options:
            raise InputError("snapshot field 'options' lacks 'keep_last'")
        validate.messages_list(messages, "snapshot field 'messages'")
        if isinstance(allow, str) or not isinstance(allow, Iterable):
            raise bad_option("allow", f" must be a list of tokenizer or scorer specs, got "
                                      f"{allow!r}")
        allowed = frozenset(allow)
        tokenizer = _snapshot_spec("tokenizer", data["tokenizer"], tokenizer, allowed)
        scorer = _snapshot_spec("scorer", data["scorer"], scorer, allowed)
        try:
            opts = ChatOptions(tokenizer=tokenizer, scorer=scorer, **options)
        except TypeError as exc:  # an unknown option name
            raise InputError(f"snapshot field 'options': {exc}") from None
        cache = data.get("prefix_cache")
        if cache is not None and not isinstance(cache, Mapping):
            raise InputError(f"snapshot field 'prefix_cache' must be a mapping or null, got "
                             f"{type(cache).__name__}")
        try:
            cache = False if cache is None else PrefixCacheOptions(**cache)
        except TypeError as exc:  # an unknown option name
            raise InputError(f"snapshot field 'prefix_cache': {exc}") from None
        summary = data.get("summary")
        if summary is not None and not (isinstance(summary, Mapping) and isinstance(
                summary.get("text"), str) and isinstance(summary.get("covers"), list)):
            raise InputError("snapshot field 'summary' must be a mapping with 'text' and "
                             "'covers'")
        try:
            sopts = SummaryOptions(**(summary or {}).get("options", {}))
        except TypeError as exc:  # an unknown option name
            raise InputError(f"snapshot field 'summary': {exc}") from None
        mem = cls(data["budget"], options=opts, prefix_cache=cache, summarize=summarize,
                  summary_options=sopts)
        mem.extend(messages)
        if data.get("vectors") is not None:
            restore_vectors(mem.features.scorer, mem._texts(), data["vectors"])
            mem._prepared = len(mem.messages)  # warm: no cold call, nothing to embed
        if summary is not None:
            state = SummaryState(summary["text"], frozenset(int(i) for i in summary["covers"]))
            if mem._window is None:
                mem._summary = state
            else:
                mem._window.summary_state = state
        return mem
