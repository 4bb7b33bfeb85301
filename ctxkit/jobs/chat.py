"""``ctxkit chat`` as a function: compress every conversation of a file to a token budget."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxkit.chat.options import ChatOptions
from ctxkit.compression.options import check_budget
from ctxkit.errors import InputError, Location, OptionError, RecordError
from ctxkit.io.messages import MESSAGE_KEYS, message_format
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    as_flags,
    load_models,
    no_progress,
    require_records,
)
from ctxkit.jobs.compress import reason_table
from ctxkit.jobs.kv import check_kv, kv_note, kv_rows

__all__ = ["ChatReport", "run_chat"]


@dataclass
class ChatReport(JobReport):
    """Tokens before and after, and per conversation the ledger of changed messages."""

    budget: int = 0
    conversations: list[dict[str, Any]] = field(default_factory=list)
    original_tokens: int = 0
    compressed_tokens: int = 0
    turns: list[dict[str, Any]] = field(default_factory=list)  # --replay: one row per message
    cache: dict[str, Any] | None = None  # --replay: prompt-cache accounting over every turn
    kv: Any = None  # KVCacheChange with --kv-model: every conversation before and after

    @property
    def changes(self) -> list[dict[str, Any]]:
        return [c for conv in self.conversations for c in conv["ledger"]]

    def summary(self) -> list[tuple[str, Any]]:
        changes = self.changes
        return [("conversations", len(self.conversations)),
                ("original tokens", self.original_tokens),
                ("compressed tokens", self.compressed_tokens),
                ("ratio", self.compressed_tokens / self.original_tokens
                 if self.original_tokens else 1.0),
                ("messages dropped", sum(c["action"] == "dropped" for c in changes)),
                ("messages shortened", sum(c["action"] == "shortened" for c in changes))] \
            + (kv_rows(self.kv) if self.kv is not None else []) + self._cache_rows()

    def _cache_rows(self) -> list[tuple[str, Any]]:
        if self.cache is None:
            return []
        c = self.cache
        return [("prompt tokens over the replay", c["tokens"]),
                ("served from a prefix cache", f"{c['cached_tokens']:,} "
                                               f"({c['hit_share']:.0%})"),
                *[(f"billed at cached price x{p}", f"{v:,.0f} token-equivalents")
                  for p, v in c["billed"].items()]]

    def to_dict(self) -> dict[str, Any]:
        out = {"input": self.input, "output": self.output, "budget": self.budget,
               "conversations": self.conversations, "skipped": self.read.to_dict()["skipped"]}
        if self.turns:
            out["turns"] = self.turns
        if self.cache is not None:
            out["prompt_cache"] = self.cache
        if self.kv is not None:
            out["kv_cache"] = self.kv.to_dict()
        return out


def _replay(messages: list[Any], budget: int, cid: str, options: ChatOptions,
            rows: list[dict[str, Any]], kv: Any = None, prefix_cache: bool = False,
            summarize: Any = None) -> Any:
    """Feed ``messages`` to a ChatMemory one by one, compressing after each; returns the last
    window (equal to ``compress_chat`` on the whole conversation unless ``prefix_cache``) and
    the replay's prompt-cache accounting. ``kv``: a ``(KVCacheShape, dtype)`` pair adds each
    turn's history and window KV bytes."""
    import time

    from ctxkit.chat.memory import ChatMemory

    mem = ChatMemory(budget, options=options, prefix_cache=prefix_cache, summarize=summarize)
    res = None
    for k, message in enumerate(messages):
        mem.add(message)
        t0 = time.perf_counter()
        res = mem.compress()
        ms = (time.perf_counter() - t0) * 1e3
        actions = [c.action for c in res.ledger]
        rows.append({"id": cid, "turn": k, "role": str(message.get("role", message.get("from"))),
                     "history_tokens": res.original_tokens, "window_tokens": res.compressed_tokens,
                     "kept": len(res.kept), "shortened": actions.count("shortened"),
                     "dropped": actions.count("dropped"), "ms": round(ms, 2)})
        turn = mem.cache_accounting().turns[-1]
        rows[-1].update(cached_tokens=turn.cached_tokens, uncached_tokens=turn.uncached_tokens)
        if kv is not None:
            change = res.kv_cache(*kv)
            rows[-1].update(history_kv_bytes=change.before.bytes,
                            window_kv_bytes=change.after.bytes)
    return res, mem.cache_accounting()


def _turn_table(rows: list[dict[str, Any]], limit: int = 200) -> list[tuple[str, Any]]:
    """The per-turn budget lines the CLI prints (the last ``limit`` when there are more)."""
    from ctxkit.kvcache.accounting import format_bytes

    def kv(r: dict[str, Any]) -> str:
        if "history_kv_bytes" not in r:
            return ""
        return (f", KV {format_bytes(r['history_kv_bytes'])} -> "
                f"{format_bytes(r['window_kv_bytes'])}")

    shown = rows[-limit:]
    return [(f"{r['id']}:{r['turn']} {r['role']}",
             f"{r['history_tokens']:,} -> {r['window_tokens']:,} tok ({r['cached_tokens']:,} "
             f"cached){kv(r)}, {r['kept']} kept "
             f"({r['shortened']} short), {r['dropped']} dropped, {r['ms']:.0f} ms")
            for r in shown]


def _bare_message_list(source: Source) -> list[Any] | None:
    """The messages of a ``.json`` file that is one bare message list, else None."""
    if source.path.suffix.lower() != ".json":
        return None
    try:
        data = json.loads(source.path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # read_records reports it with its location
    if isinstance(data, list) and data and all(
            isinstance(m, Mapping) and not any(k in m for k in MESSAGE_KEYS) for m in data):
        return data
    return None


def _conversations(source: Source, read: Any) -> Iterator[tuple[str, list[Any], Any, Any]]:
    """``(id, messages, holder record or None, location)`` per conversation."""
    bare = _bare_message_list(source)
    if bare is not None:
        read.source, read.read = str(source.path), 1
        yield "0", bare, None, Location(str(source.path))
        return
    for rec in source.records(read):
        key = next(k for k in MESSAGE_KEYS if k in rec.raw)
        yield rec.id, rec.raw[key], (rec.raw, key), rec.location


def run_chat(
    source: Source,
    target: Target,
    *,
    budget: int,
    keep_last: int = ChatOptions.keep_last,
    keep_system: bool = ChatOptions.keep_system,
    query: str | None = None,
    scorer: str = ChatOptions.scorer,
    tokenizer: str = ChatOptions.tokenizer,
    alternate: bool = ChatOptions.alternate,
    shorten: bool = ChatOptions.shorten,
    replay: bool = False,
    prefix_cache: bool = False,
    summarize: str | None = None,
    summary_model: str | None = None,
    kv_model: str | None = None,
    kv_dtype: str = "bfloat16",
    progress: Progress = no_progress,
) -> ChatReport:
    """Compress each conversation of ``source`` to ``budget`` tokens.

    The input is a ``.json`` file holding one bare message list (OpenAI or ShareGPT turns),
    or records (JSONL, JSON, Parquet) whose ``messages``/``conversations`` field holds one.
    The output's format follows its suffix: ``.json`` gets the bare list back for a bare list
    and an array of records otherwise; ``.jsonl`` and ``.parquet`` get one record per
    conversation (a bare list becomes ``{"messages": [...]}``). Records keep every field.

    ``replay``: feed each conversation to a :class:`~ctxkit.ChatMemory` one message at a time
    and compress after each, as a chat application would; every turn's history and window
    tokens go to ``report.turns``, with the tokens of each window served from a provider's
    prefix cache (the leading messages identical to the previous window's) and the replay's
    billed input at cached prices of 0.1 and 0.5 (``report.cache``). The written output is the
    last window. ``prefix_cache``: the memory keeps prefix-cache-friendly windows
    (:class:`~ctxkit.chat.prefix_window.PrefixWindow`); needs ``replay``.
    ``summarize`` (``extractive``, ``smollm2`` or an OpenAI-compatible base URL with
    ``summary_model``): evicted turns are folded into one summary message
    (:func:`~ctxkit.chat.summarizers.summarizer_from_spec`).

    ``kv_model`` (a preset name, ``config.json`` or model directory) adds the KV-cache memory
    of the conversations before and after (each conversation one sequence) in ``kv_dtype``,
    and with ``replay`` each turn's.
    """
    from ctxkit.io.outputs import write_json

    run = _ChatRun.plan(budget, query=query, replay=replay,
                        prefix_cache=prefix_cache, summarize=summarize,
                        summary_model=summary_model, kv_model=kv_model, kv_dtype=kv_dtype,
                        output=target.output, keep_last=keep_last, keep_system=keep_system,
                        tokenizer=tokenizer, scorer=scorer, alternate=alternate,
                        shorten=shorten)
    source = Source(source.path, template="messages", id_field=source.id_field,
                    skip_bad=source.skip_bad)
    source.check()
    target.check((source.path,))
    report = ChatReport(command="chat", input=str(source.path), output=str(target.output),
                        budget=run.budget, title="chat")
    with target.staged() as (staged, report_tmp):
        with progress("compressing chats") as advance:
            done = [_compress_one(run, conv, report, source.skip_bad) for conv in
                    _advancing(_conversations(source, report.read), advance)]
        kept = [d for d in done if d is not None]
        require_records(len(kept), source, report.read)
        _write_windows(staged.path(target.output), run, kept)
        _fill_report(report, run, kept, tokenizer)
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report


@dataclass
class _ChatRun:
    """One ``ctxkit chat`` run's settings, checked before any input is read."""

    budget: int
    opts: ChatOptions
    query: str | None
    replay: bool
    prefix_cache: bool
    summarizer: Any
    kv: tuple[Any, str] | None  # (KV-cache shape, dtype) with --kv-model
    fmt: str  # the output's record format
    suffix: str  # the output's suffix, which write_records reads the format from

    @classmethod
    def plan(cls, budget: int, *, query: str | None, replay: bool,
             prefix_cache: bool, summarize: str | None, summary_model: str | None,
             kv_model: str | None, kv_dtype: str, output: Any, **options: Any) -> _ChatRun:
        from ctxkit.io.outputs import record_format

        budget = as_flags(check_budget, budget)
        opts = as_flags(ChatOptions, **options)
        if prefix_cache and not replay:
            raise OptionError("--prefix-cache", "--prefix-cache applies to --replay (a window "
                                                "kept across turns); add --replay")
        if replay and query is not None:
            raise OptionError("--query", "--replay compresses each turn for its own last user "
                                         "message; drop --query")
        if summary_model is not None and not (summarize or "").startswith(("http://",
                                                                           "https://")):
            raise OptionError("--summary-model", "--summary-model names the model of an "
                                                 "endpoint given to --summarize URL; give that "
                                                 "URL or drop --summary-model")
        summarizer = None
        if summarize is not None:
            from ctxkit.chat.summarizers import summarizer_from_spec

            summarizer = as_flags(summarizer_from_spec, summarize, model=summary_model)
        fmt = record_format(output)
        kv_shape = check_kv(kv_model, kv_dtype)
        kv = None if kv_shape is None else (kv_shape, kv_dtype)
        # models load once per run, so model-backed scorers load once
        return cls(budget, load_models(opts), query, replay, prefix_cache, summarizer, kv, fmt,
                   output.suffix)


@dataclass
class _Window:
    """One conversation's window: its result, the record that held it (None for a bare
    message list) and, with ``--replay``, the replay's prompt-cache accounting."""

    cid: str
    result: Any
    holder: tuple[dict[str, Any], str] | None
    cache: Any = None


def _advancing(items: Iterator[Any], advance: Callable[[], None]) -> Iterator[Any]:
    for item in items:
        yield item
        advance()


def _compress_one(run: _ChatRun, conv: tuple[str, list[Any], Any, Any], report: ChatReport,
                  skip_bad: bool) -> _Window | None:
    """One conversation's window. A conversation that cannot be compressed (bad messages, a
    budget too small for what must stay) is an error naming it, or with ``--skip-bad`` a
    skipped record in the report (and None)."""
    from ctxkit.chat.pipeline import compress_chat

    cid, messages, holder, where = conv
    try:
        if not run.replay:
            return _Window(cid, compress_chat(messages, run.budget, query=run.query,
                                              options=run.opts, summarize=run.summarizer),
                           holder)
        message_format(messages)  # a list of messages, one format
        if not messages:
            raise InputError("no messages to replay")
        res, cache = _replay(messages, run.budget, cid, run.opts, report.turns, run.kv,
                             run.prefix_cache, run.summarizer)
        return _Window(cid, res, holder, cache)
    except (ValueError, TypeError) as exc:
        record_id = None if holder is None else cid
        if not skip_bad:
            raise InputError(str(exc), location=where, record_id=record_id) from None
        report.read.read -= 1  # read, but not usable: counted once, as skipped
        report.read.skipped.append(RecordError(
            where.source, where.line, str(exc), record_id, element=where.element,
            row=where.row))
        return None


def _write_windows(path: Any, run: _ChatRun, kept: list[_Window]) -> None:
    """The output: the bare list back for a bare list in ``.json``, else one record per
    conversation with every field it had (a bare list becomes ``{"messages": [...]}``)."""
    from ctxkit.io.outputs import write_json, write_records

    bare = kept[0].holder is None
    if bare and run.fmt == "json":
        write_json(path, kept[0].result.messages)
        return
    rows = [{"messages": w.result.messages} if w.holder is None
            else {**w.holder[0], w.holder[1]: w.result.messages} for w in kept]
    write_records(path, rows, fmt=run.suffix)


def _fill_report(report: ChatReport, run: _ChatRun, kept: list[_Window], tokenizer: str
                 ) -> None:
    """Totals, ledgers, prompt-cache and KV figures, and the printed tables, from the
    windows written."""
    for w in kept:
        report.original_tokens += w.result.original_tokens
        report.compressed_tokens += w.result.compressed_tokens
        entry = w.result.to_dict()
        del entry["messages"]
        report.conversations.append({"id": w.cid, **entry})
    caches = [w.cache for w in kept if w.cache is not None]
    if caches:
        from ctxkit.chat.billing import CacheAccountingResult

        report.cache = CacheAccountingResult(
            tuple(t for c in caches for t in c.turns)).to_dict()
    if run.kv is not None:
        from ctxkit.kvcache.accounting import kv_cache_change

        kv_shape, kv_dtype = run.kv
        report.kv = kv_cache_change(
            kv_shape, [c["original_tokens"] for c in report.conversations],
            [c["compressed_tokens"] for c in report.conversations], kv_dtype)
        report.notes.append(kv_note(report.kv.before, tokenizer))
    if report.turns:
        report.tables.append(("per-turn budget (history -> window)",
                              _turn_table(report.turns)))
    reasons = reason_table(c["code"] for c in report.changes)
    if reasons:
        report.tables.append(("changed messages by reason", reasons))
