"""``ctxkit embed`` as a function: packed embedding passes over records, streamed in chunks."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError, OptionError
from ctxkit.jobs.common import (
    JobReport,
    Progress,
    Source,
    Target,
    check_suffix,
    no_progress,
    nonempty_records,
)

__all__ = ["EmbedReport", "embed_options", "run_embed"]


def embed_options(**options: Any) -> Any:
    """The :class:`~ctxkit.embedding.options.EmbedOptions` of a command, checked before any
    model loads: a bad option or a device this machine lacks is an error naming the flag."""
    from ctxkit.embedding.model import resolve_device, resolve_dtype
    from ctxkit.embedding.options import EmbedOptions
    from ctxkit.options import cli_option_error

    try:
        opts = EmbedOptions(**options)
    except OptionError as exc:
        raise cli_option_error(exc) from None
    try:  # cheap checks first: a machine without the device fails before anything loads
        option = "--device"
        dev = resolve_device(opts.device)
        option = "--dtype"
        resolve_dtype(opts.dtype, dev)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None
    return opts


@dataclass
class EmbedReport(JobReport):
    """Vectors written, with the packing figures of the passes that made them."""

    stats: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    dim: int = 0
    max_seq_length: int = 0
    ids_path: str | None = None

    def summary(self) -> list[tuple[str, Any]]:
        s = self.stats
        rows = [
            ("texts", s["texts"]), ("tokens", s["tokens"]), ("rows", s["rows"]),
            ("utilization", s["utilization"]),
            ("texts/s", s["texts"] / self.seconds if self.seconds else 0.0),
            ("empty texts", s["empty"]),
            (f"truncated (> {self.max_seq_length} tokens)", s["truncated"]),
            ("skipped records", self.read.n_skipped), ("output", self.output),
        ]
        if self.ids_path is not None:
            rows.append(("ids", self.ids_path))
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {**self.stats, "wall_seconds": self.seconds,
                "skipped": self.read.to_dict()["skipped"], "output": self.output,
                "dim": self.dim, "max_seq_length": self.max_seq_length}


def run_embed(
    source: Source,
    target: Target,
    *,
    ids: bool = False,
    model: Path | None = None,
    device: str = "auto",
    dtype: str = "auto",
    batch_tokens: int | None = None,
    chunk_size: int = 8192,
    normalize: bool | None = None,
    progress: Progress = no_progress,
) -> EmbedReport:
    """Embed every record's text and write the vectors to ``target.output``: ``.npy``
    (float32, input order; ``ids`` adds ``<output>.ids.jsonl`` beside it) or ``.parquet``
    (an ``embedding`` column, and ``id`` with ``ids``).

    Records are read, packed and written ``chunk_size`` at a time, so memory stays bounded.
    The input and the options are checked before the model is loaded.
    """
    from ctxkit.io.outputs import write_json, write_npy, write_parquet

    suffix = check_suffix(target.output, (".npy", ".parquet"))
    opts = embed_options(model=model, device=device, dtype=dtype, batch_tokens=batch_tokens,
                         chunk_size=chunk_size, normalize=normalize)
    ids_target = target.output.with_name(target.output.name + ".ids.jsonl") \
        if ids and suffix == ".npy" else None
    source.check()
    target.check((source.path,), files=() if ids_target is None else (ids_target,))
    report = EmbedReport(command="embed", input=str(source.path), output=str(target.output),
                         title="ctxkit embed")
    records = nonempty_records(source, report.read)

    from ctxkit.embedding.encoder import EncodeStats, PackedEncoder

    try:
        enc = PackedEncoder(options=opts)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None
    total = EncodeStats()
    t0 = time.perf_counter()

    def chunks() -> Iterator[tuple[list[str], Any]]:
        with progress("embedding") as advance:
            while batch := list(itertools.islice(records, chunk_size)):
                vecs = enc.encode([r.text for r in batch])  # options: batch_tokens, normalize
                total.add(enc.last_stats)
                advance(len(batch))
                yield [r.id for r in batch], vecs

    with target.staged() as (staged, report_tmp):
        out_tmp = staged.path(target.output)
        if suffix == ".npy":
            ids_tmp = None if ids_target is None else staged.path(ids_target)
            with contextlib.ExitStack() as stack:
                id_fh = None if ids_tmp is None else stack.enter_context(
                    open(ids_tmp, "w", encoding="utf-8"))

                def vectors() -> Iterator[Any]:
                    for chunk_ids, vecs in chunks():
                        if id_fh is not None:
                            id_fh.writelines(json.dumps(i, ensure_ascii=False) + "\n"
                                             for i in chunk_ids)
                        yield vecs

                write_npy(out_tmp, vectors(), enc.dim)
        else:
            import pyarrow as pa

            vector_type = pa.list_(pa.float32(), enc.dim)
            schema = pa.schema(([("id", pa.string())] if ids else [])
                               + [("embedding", vector_type)])

            def tables() -> Iterator[Any]:
                for chunk_ids, vecs in chunks():
                    flat = pa.array(vecs.reshape(-1), type=pa.float32())
                    cols = {"embedding": pa.FixedSizeListArray.from_arrays(flat, enc.dim)}
                    yield pa.table({"id": chunk_ids, **cols} if ids else cols, schema=schema)

            write_parquet(out_tmp, tables(), schema=schema)
        report.seconds = time.perf_counter() - t0
        report.stats = total.to_dict()
        report.dim, report.max_seq_length = enc.dim, enc.max_seq_length
        report.ids_path = None if ids_target is None else str(ids_target)
        if report_tmp is not None:
            write_json(report_tmp, report.to_dict())
    return report
