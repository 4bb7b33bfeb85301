"""``ctxkit pack`` as a function: tokenize records, pack them into windows, write the table."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxkit.errors import InputError, OptionError, SequenceTooLongError
from ctxkit.io.records import ReadReport, Record
from ctxkit.jobs.common import (
    DEFAULT_TOKENIZER,
    MAX_CAPACITY,
    JobReport,
    Progress,
    Source,
    Target,
    check_suffix,
    load_tokenizer,
    no_progress,
    require_records,
)
from ctxkit.packing.options import MAX_TOKEN_ID, PackOptions

__all__ = ["MAX_CAPACITY", "PackReport", "parse_separator", "run_pack"]

_TOKENIZE_BATCH = 1024
_PADDED_BYTES_PER_SLOT = 4 * 8  # input_ids, labels, position_ids, segment_ids (int64)


def parse_separator(separator: str, tok: Any) -> int | None:
    """``eos`` (the tokenizer's end-of-sequence id), ``none``, or a token id."""
    value = separator.strip().lower()
    if value == "none":
        return None
    if value == "eos":
        if tok.eos_id is None:
            raise OptionError("--separator", f"tokenizer {tok.name} has no EOS token; use "
                                             "--separator none or an id")
        return int(tok.eos_id)
    try:
        sep = int(value)
    except ValueError:
        sep = -1
    top = min(MAX_TOKEN_ID, vocab_size(tok) - 1)
    if not 0 <= sep <= top:
        raise OptionError("--separator", "--separator must be 'eos', 'none' or a token id of "
                                         f"tokenizer {tok.name} (0..{top:,}), got {separator!r}")
    return sep


def vocab_size(tok: Any) -> int:
    """How many token ids ``tok`` has (tiktoken's ``n_vocab``, a Hugging Face tokenizer's
    length); ``MAX_TOKEN_ID + 1`` for a tokenizer that does not say."""
    backend = getattr(tok, "encoding", None) or getattr(tok, "backend", None)
    n = getattr(backend, "n_vocab", None)
    if n is None and backend is not None and hasattr(backend, "__len__"):
        n = len(backend)
    return int(n) if n else MAX_TOKEN_ID + 1


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_padded_size(need: np.ndarray, capacity: int, layout: str) -> None:
    """Refuse a padded output that cannot fit in memory (``--capacity 10**12`` would try to
    allocate terabytes) before allocating it."""
    if layout != "padded":
        return
    windows = max(1, -(-int(np.minimum(need, capacity).sum()) // capacity))
    size = windows * capacity * _PADDED_BYTES_PER_SLOT
    memory = _memory_bytes()
    if memory is not None and size > memory:
        raise OptionError("--capacity", f"padded windows of {capacity:,} tokens would take at "
                                        f"least {size / 2**30:,.0f} GiB (this machine has "
                                        f"{memory / 2**30:,.0f} GiB); use a smaller --capacity "
                                        "or --layout flat")


@dataclass
class PackReport(JobReport):
    """Windows written and the accounting of every record (split, truncated, dropped, empty)."""

    tokenizer: str = ""
    capacity: int = 0
    strategy: str = ""
    overflow: str = ""
    layout: str = ""
    separator_id: int | None = None
    records: int = 0
    windows: int = 0
    lower_bound: int = 0
    utilization: float = 0.0
    padding_tokens: int = 0
    packed_tokens: int = 0
    segments: int = 0
    tokens_truncated: int = 0
    split: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)

    def summary(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("records read", self.read.read)] if self.input else []
        rows += [
            ("windows", self.windows), ("lower bound", self.lower_bound),
            ("utilization", self.utilization), ("padding tokens", self.padding_tokens),
            ("packed tokens", self.packed_tokens), ("segments", self.segments),
            ("split", len(self.split)),
            ("truncated", f"{len(self.truncated)} ({self.tokens_truncated:,} tokens cut)"),
            ("dropped", len(self.dropped)), ("empty", len(self.empty)),
        ]
        if self.input:
            rows.append(("skipped bad records", self.read.n_skipped))
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input, "output": self.output, "tokenizer": self.tokenizer,
            "capacity": self.capacity, "strategy": self.strategy, "overflow": self.overflow,
            "layout": self.layout, "separator_id": self.separator_id, "records": self.records,
            "windows": self.windows, "lower_bound": self.lower_bound,
            "utilization": self.utilization, "padding_tokens": self.padding_tokens,
            "packed_tokens": self.packed_tokens, "tokens_truncated": self.tokens_truncated,
            "split": self.split, "truncated": self.truncated, "dropped": self.dropped,
            "empty": self.empty, "read": self.read.to_dict(),
        }


def batch_report(batch: Any, ids: list[str], **fields: Any) -> PackReport:
    """A :class:`PackReport` of a :class:`~ctxkit.packing.result.PackResult` (ids by index)."""
    def named(idx: np.ndarray) -> list[str]:
        return [ids[i] for i in idx.tolist()]

    report = PackReport(
        command="pack", capacity=batch.capacity, strategy=batch.strategy, records=len(ids),
        windows=batch.n_windows, lower_bound=batch.lower_bound, utilization=batch.utilization,
        padding_tokens=batch.padding_tokens, packed_tokens=batch.total_tokens,
        segments=batch.n_segments, tokens_truncated=batch.tokens_truncated,
        split=named(batch.split), truncated=named(batch.truncated),
        dropped=named(batch.dropped), empty=named(batch.empty), **fields)
    report.title = f"packing report ({batch.strategy}, capacity {batch.capacity:,})"
    report.id_lists = [(name, getattr(report, name)) for name in ("truncated", "dropped", "empty")]
    return report


def run_pack(
    source: Source,
    target: Target,
    *,
    capacity: int,
    tokenizer: str = DEFAULT_TOKENIZER,
    strategy: str = PackOptions.strategy,
    separator: str = "eos",
    overflow: str = PackOptions.overflow,
    layout: str = PackOptions.layout,
    seed: int | None = PackOptions.seed,
    pad_id: int = PackOptions.pad_id,
    train_on_prompt: bool = False,
    label_separators: bool = PackOptions.label_separators,
    progress: Progress = no_progress,
) -> PackReport:
    """Tokenize ``source``'s records, pack them into windows of ``capacity`` tokens and write
    one row per window to ``target.output`` (``.parquet``, ``.jsonl`` or ``.json``).

    With the ``alpaca`` template the prompt is masked out of the labels unless
    ``train_on_prompt``. Every record ends up in a window or in the report (truncated,
    dropped, empty); a record over the window with ``overflow="error"`` is an error naming it.

    Example:
        >>> import json, os, tempfile
        >>> from pathlib import Path
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "in.jsonl").write_text(json.dumps({"text": "hello world"}) + "\\n")
        >>> rep = run_pack(Source(d / "in.jsonl"), Target(d / "out.jsonl"), capacity=16)
        >>> rep.windows, rep.records
        (1, 1)
    """
    from ctxkit.io.outputs import write_json, write_parquet, write_records
    from ctxkit.options import cli_option_error
    from ctxkit.packing.hf import packed_table
    from ctxkit.packing.options import PackOptions
    from ctxkit.packing.sequences import pack_arrays

    try:
        opts = PackOptions(capacity=capacity, strategy=strategy, overflow=overflow,
                           layout=layout, pad_id=pad_id, seed=seed,
                           label_separators=label_separators)
    except OptionError as exc:
        raise cli_option_error(exc) from None
    suffix = check_suffix(target.output, (".parquet", ".jsonl", ".json"))
    if seed is not None and not 0 <= seed < 2**64:
        raise OptionError("--seed", f"--seed must be in 0..2**64-1, got {seed}")
    source.check()
    target.check((source.path,))
    tok = load_tokenizer(tokenizer)
    sep = parse_separator(separator, tok)
    if pad_id >= vocab_size(tok):
        raise OptionError("--pad-id", f"--pad-id must be a token id of tokenizer {tok.name} "
                                      f"(0..{vocab_size(tok) - 1:,}), got {pad_id}")
    opts = opts.replace(separator_id=sep)

    report_fields = dict(input=str(source.path), output=str(target.output), tokenizer=tok.name,
                         overflow=overflow, layout=layout, separator_id=sep)
    with target.staged() as (staged, report_tmp):
        out_tmp = staged.path(target.output)
        data = _tokenize(source, tok, template_mask=not train_on_prompt, progress=progress)
        require_records(len(data.ids), source, data.read)
        need = data.lengths + (data.lengths > 0) * (0 if sep is None else 1)
        _check_padded_size(need, capacity, layout)
        try:
            batch = pack_arrays(data.tokens, data.lengths, completion_mask=data.mask,
                                options=opts)
        except SequenceTooLongError as exc:
            i = int(exc.index)
            raise InputError(
                f"record {data.ids[i]} ({data.locations[i]}) has {exc.tokens:,} tokens, more "
                f"than --capacity {capacity:,}; {exc.count} record(s) are too long (use "
                "--overflow split, truncate or drop)", index=i) from None
        table = packed_table(batch, ids=data.ids)
        if suffix == ".parquet":
            write_parquet(out_tmp, table)
        else:
            write_records(out_tmp, (row for part in table.to_batches(1024)
                                    for row in part.to_pylist()), fmt=suffix)
        report = batch_report(batch, data.ids, read=data.read, **report_fields)
        report.notes.append(f"wrote {batch.n_windows:,} windows to {target.output}")
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report


@dataclass
class _Tokenized:
    ids: list[str] = field(default_factory=list)
    locations: list[Any] = field(default_factory=list)
    tokens: np.ndarray | None = None
    mask: np.ndarray | None = None
    lengths: np.ndarray | None = None
    read: ReadReport = field(default_factory=ReadReport)


def _tokenize(source: Source, tok: Any, *, template_mask: bool, progress: Progress
              ) -> _Tokenized:
    """Every record's tokens back to back (and the alpaca completion mask), in batches."""
    out = _Tokenized()
    chunks: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    lengths: list[int] = []
    use_mask = source.template == "alpaca" and template_mask

    def flush(pending: list[Record]) -> None:
        if use_mask:
            prompts = tok.encode_batch([r.prompt or "" for r in pending])
            completions = tok.encode_batch([r.completion or "" for r in pending])
            for p, c in zip(prompts, completions):
                chunks.append(np.asarray(p + c, dtype=np.int64))
                masks.append(np.r_[np.zeros(len(p), bool), np.ones(len(c), bool)])
                lengths.append(len(p) + len(c))
        else:
            for ids_ in tok.encode_batch([r.text for r in pending]):
                chunks.append(np.asarray(ids_, dtype=np.int64))
                lengths.append(len(ids_))

    with progress("tokenizing") as advance:
        pending: list[Record] = []
        for record in source.records(out.read):
            pending.append(record)
            out.ids.append(record.id)
            out.locations.append(record.location)
            if len(pending) >= _TOKENIZE_BATCH:
                flush(pending)
                advance(len(pending))
                pending = []
        if pending:
            flush(pending)
            advance(len(pending))
    out.tokens = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    out.mask = np.concatenate(masks) if use_mask and masks else None
    out.lengths = np.asarray(lengths, dtype=np.int64)
    return out
