"""What ``ctxkit dedup|embed|pack ... --ray ADDRESS`` runs: read, run the stage on Ray, write.

The CLI parses its options as usual and hands them to :func:`run_command`, which connects to
Ray (``ADDRESS``: ``local`` starts a local instance, ``auto`` joins the cluster this machine
belongs to, ``ray://head:10001`` a remote one), reads the input with Ray Data's readers (a
``.jsonl``/``.json``/``.parquet`` file, a directory of them, or a cloud URI), runs the stage
and writes the result. ``-o out.parquet`` (or ``.jsonl``) is the file written: the workers
write part files beside it and the driver joins them into it; an existing directory or a URI
receives the part files themselves (:mod:`ctxkit.distributed.output`). The input and the
output are checked before Ray starts. Small outputs are written by the driver, atomically: the
dedup report (``--report``, one entry per removed record) and ``.npy`` embeddings (collected in
input order; use ``.parquet`` for big corpora). It returns ``(metric, value)`` rows for the
CLI's summary table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.deduplication.options import MinHashOptions
from ctxkit.distributed.cluster import init_ray, require_ray
from ctxkit.distributed.errors import WorkerInputError, raise_worker_errors, worker_input_error
from ctxkit.distributed.output import RayOutput, check_output, uri, write_dataset
from ctxkit.distributed.rows import ROW
from ctxkit.errors import InputError, InputNotFoundError, OptionError

__all__ = ["COMMANDS", "read_dataset", "run_command"]

COMMANDS = ("dedup", "embed", "pack")
_FORMATS = {".jsonl": "json", ".ndjson": "json", ".json": "json", ".parquet": "parquet",
            ".pq": "parquet"}
_M = MinHashOptions()  # the MinHash defaults (the CLI passes every option; Python callers may not)
# what -o may end in, per command (.npy: written by the driver)
OUTPUTS = {"dedup": (".jsonl", ".parquet"), "embed": (".npy", ".parquet"),
           "pack": (".jsonl", ".parquet")}


def _format_of(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        found = {_FORMATS[f.suffix.lower()] for f in p.iterdir() if f.suffix.lower() in _FORMATS}
        if len(found) != 1:
            raise InputError(f"input directory {path} must hold .jsonl/.json or .parquet "
                             "files, one kind")
        return found.pop()
    suffix = p.suffix.lower()
    if suffix not in _FORMATS:
        raise InputError(f"input must be .jsonl, .json or .parquet (file or directory), got "
                         f"{path}")
    if "://" not in path and not p.exists():
        raise InputNotFoundError(path)
    return _FORMATS[suffix]


def read_dataset(path: str | Path, columns: list[str] | None = None) -> Any:
    """A Ray dataset over ``path`` (file, directory or URI), checked to have ``columns``
    (when given: the check reads the first blocks)."""
    ray = require_ray()
    path = uri(path)
    if _format_of(path) == "parquet":
        ds = ray.data.read_parquet(path)
    else:
        ds = ray.data.read_json(path, lines=not path.endswith(".json"))
    raise_worker_errors(ds)
    if columns is None:
        return ds
    names = ds.columns() or []
    missing = [c for c in columns if c not in names]
    if missing:
        raise InputError(f"field(s) {missing} not in {path} (fields: {names})")
    return ds


def run_command(
    command: str,
    address: str | None,
    input_path: str | Path,
    output: str | Path,
    *,
    field: str | None = None,
    id_field: str | None = None,
    report_path: str | Path | None = None,
    template: str | None = None,
    skip_bad: bool = False,
    on_stage: Any = None,
    **options: Any,
) -> list[tuple[str, Any]]:
    """Run ``ctxkit <command>`` on Ray; returns rows for the summary table.

    ``field``, ``id_field`` and ``template`` read records as the local command does (the
    ``alpaca`` and ``messages`` templates run in the workers). Options by command:

    - ``dedup``: ``method`` (only ``"minhash"`` is distributed), ``threshold``, ``keep``,
      ``num_perm``, ``ngram``, ``unit``, ``seed``, ``punctuation``;
    - ``embed``: ``options`` (an :class:`~ctxkit.embedding.options.EmbedOptions`; its
      ``model`` must be a directory every node can read) or its fields as keywords, and
      ``ids`` (also write record ids);
    - ``pack``: ``options`` (a :class:`~ctxkit.packing.options.PackOptions`) or its fields as
      keywords, ``tokenizer``, ``train_on_prompt`` (alpaca) and ``mode`` (``"global"``, the
      windows of a local run, or ``"block"``).

    ``output`` is the file written (an existing directory or a URI receives part files, see
    :mod:`ctxkit.distributed.output`). ``skip_bad`` is refused: a bad record stops the run with
    a one-line :class:`~ctxkit.errors.InputError` naming it (the worker's typed
    :class:`~ctxkit.distributed.errors.WorkerInputError`). The options, the input and the
    output are checked before Ray starts. Raises
    :class:`~ctxkit.distributed.cluster.RayMissingError` when Ray is not installed.
    """
    from ctxkit.options import cli_option_error

    if command not in COMMANDS:
        raise InputError(f"--ray supports {', '.join(COMMANDS)}, not {command!r}")
    if skip_bad:
        raise OptionError("--skip-bad", "--skip-bad does not run with --ray (a bad record "
                          "stops the run and is named); run without --ray, or fix the record")
    if template is not None and field is not None and command != "dedup":
        raise OptionError("--template", "give either --template or --field, not both")
    if command == "dedup":
        if template is not None:
            raise OptionError("--template", "--template does not run with dedup --ray; use "
                              "--field")
        _check_dedup_method(options.get("method", "minhash"))
    try:  # options, input and output are checked before Ray starts
        options = _with_option_set(command, options)
    except OptionError as exc:
        raise cli_option_error(exc) from None
    _format_of(uri(input_path))
    target = check_output(output, OUTPUTS[command], input_path=input_path, report=report_path,
                          ids_file=command == "embed" and bool(options.get("ids")))
    reader = _Reader(str(input_path), None if template else (field or "text"), template,
                     id_field)
    ray = require_ray()
    init_ray(None if address in (None, "", "local") else address)
    start = time.perf_counter()
    try:
        if command == "dedup":
            rows = _dedup(input_path, target, field or "text", id_field, report_path,
                          on_stage=on_stage, **options)
        elif command == "embed":
            rows = _embed(reader, target, report_path, **options)
        else:
            rows = _pack(reader, target, report_path, **options)
    except OptionError as exc:
        raise cli_option_error(exc) from None
    except ray.exceptions.RayError as exc:
        # A bad record raises a typed error inside a worker; Ray hands it back as the cause.
        found = worker_input_error(exc)
        if found is None:
            raise
        raise InputError(found.message) from None
    seconds = time.perf_counter() - start
    return [("ray cluster CPUs / GPUs", f"{int(ray.cluster_resources().get('CPU', 0))} / "
             f"{int(ray.cluster_resources().get('GPU', 0))}"), *rows, ("seconds", seconds)]


def _with_option_set(command: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the stage's option-set fields (or its ``options``) folded into one
    validated option set, ``opts``."""
    import dataclasses

    if command == "pack":
        from ctxkit.packing.options import PackOptions as cls
    elif command == "embed":
        from ctxkit.embedding.options import EmbedOptions as cls
    else:
        return options
    names = {f.name for f in dataclasses.fields(cls)}
    rest = {k: v for k, v in options.items() if k not in names and k != "options"}
    given = {k: v for k, v in options.items() if k in names}
    return {**rest, "opts": cls.resolve(options.get("options"), **given)}


class _Reader:
    """Reads records as ``read_records`` does, inside the workers: one validated record per
    row (templates applied), with the record's id as text (``id_field``, else the rule of
    :func:`~ctxkit.io.records.record_id`)."""

    def __init__(self, path: str, field: str | None, template: str | None,
                 id_field: str | None) -> None:
        from ctxkit.io.records import TEMPLATES

        if template is not None and template not in TEMPLATES:
            raise OptionError("--template", f"unknown --template {template!r}; choose one of "
                             f"{', '.join(TEMPLATES)}")
        self.path, self.field, self.template, self.id_field = path, field, template, id_field

    def dataset(self) -> tuple[Any, int]:
        """The input numbered in order (``_row``) and its row count."""
        from ctxkit.distributed.rows import index_rows

        cols = ([self.field] if self.field else []) + ([self.id_field] if self.id_field else [])
        ds, n = index_rows(read_dataset(self.path, cols))
        if n == 0:
            raise InputError(f"no records in {self.path}")
        return raise_worker_errors(ds), n

    def records(self, batch: dict[str, np.ndarray]) -> list:
        from ctxkit.errors import Location
        from ctxkit.io.records import RecordError, record_from_dict

        rows = np.asarray(batch[ROW]).tolist()
        keys = [k for k in batch if k != ROW]
        out = []
        for i, row in enumerate(rows):
            obj = _plain({k: batch[k][i] for k in keys})
            try:
                out.append(record_from_dict(
                    obj, index=row, field=self.field, template=self.template,
                    id_field=self.id_field, location=Location(self.path, row=row)))
            except RecordError as exc:
                raise WorkerInputError(str(exc), exc.record_id) from None
        return out


def _plain(value: Any) -> Any:
    """An Arrow/numpy cell as the plain Python value JSON parsing gives. Arrow gives every
    object of a column the union of their keys, filling the missing ones with None; those
    keys are dropped again (so ``{"from": ..., "value": ...}`` turns stay ShareGPT turns)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.dtype == object else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_dedup_method(method: Any) -> None:
    stages = [m.strip() for m in method.split(",")] if isinstance(method, str) else list(method)
    if stages != ["minhash"]:
        raise OptionError("--method", f"with --ray only --method minhash runs distributed, got "
                          f"{method!r} (run exact dedup without --ray, or as a first pass)")


def _dedup(input_path, output, field, id_field, report_path, method="minhash", threshold=None,
           keep="first", num_perm=_M.num_perm, ngram=_M.ngram, unit=_M.unit, seed=_M.seed,
           punctuation=False, on_stage=None) -> list:
    from contextlib import nullcontext

    from ctxkit.deduplication.normalize import Normalization
    from ctxkit.distributed.minhash import minhash_dedup

    if isinstance(threshold, dict):
        threshold = threshold.get("minhash")
    # the columns are checked on the first block read: asking the dataset for them first
    # would read a JSON input twice
    out = minhash_dedup(_dedup_input(input_path), column=field, threshold=threshold,
                        num_perm=num_perm, id_column=id_field, record_ids=True, ngram=ngram,
                        unit=unit, seed=seed, keep=keep,
                        normalization=Normalization(punctuation=punctuation),
                        on_stage=on_stage)
    stage = on_stage or (lambda name: nullcontext())
    where = write_dataset(out.kept, output, on_stage)
    n, removed = out.result.n, out.result.n_removed
    if report_path is not None:  # the local report's fields, "line" aside
        with stage("report file"):
            _write_report(report_path, input_path, where, threshold, keep, out)
    return [("records", n), ("kept", n - removed), ("removed (minhash)", removed),
            ("candidate pairs", out.info["candidates"]), ("verified pairs", out.info["verified"]),
            ("output", where)]


def _dedup_input(input_path: str | Path) -> Any:
    """A local JSON lines file is read by many tasks at once (:mod:`ctxkit.distributed.reader`);
    anything else by Ray Data's readers. Only dedup reads this way: it reads one text column,
    where the other commands read whole records whose nested types Ray Data infers per file."""
    from ctxkit.distributed.reader import read_jsonl

    path = Path(uri(input_path))
    if "://" not in str(path) and path.is_file() and path.suffix.lower() in (".jsonl", ".ndjson"):
        return read_jsonl(path)
    return read_dataset(input_path)


def _write_report(report_path, input_path, where, threshold, keep, out) -> None:
    """The local command's report, the same bytes as its ``write_json``, with the entries
    streamed from the report dataset a batch at a time (the driver never holds them all)."""
    import json

    from ctxkit.io.outputs import atomic_write

    n, removed = out.result.n, out.result.n_removed
    head = json.dumps({
        "input": str(input_path), "output": where, "method": ["minhash"],
        "threshold": threshold, "keep": keep, "records": n, "kept": n - removed,
        "removed": removed, "skipped": [], "stages": {"minhash": out.info},
        "warnings": out.result.warnings, "duplicates": []}, ensure_ascii=False, indent=2)
    head, tail = head[:-len("[]\n}")], "]\n}\n"
    with atomic_write(report_path) as fh:
        fh.write(head + "[")
        first = True
        for entries in _ledger(out.report):
            for e in entries:
                fh.write("\n    " if first else ",\n    ")
                fh.write(json.dumps(e, ensure_ascii=False, indent=2).replace("\n", "\n    "))
                first = False
        fh.write(tail if first else "\n  " + tail)


def _ledger(report: Any) -> Iterator[list[dict[str, Any]]]:
    """The report dataset's rows as the local ledger's entries (in row order), a batch of
    entries at a time."""
    for batch in report.iter_batches(batch_size=65536, batch_format="pyarrow"):
        entries = batch.select(["id", "duplicate_of", "method", "matched", "similarity"]
                               ).to_pylist()
        for e in entries:  # Python's rounding, as the local ledger's
            e["similarity"] = round(e["similarity"], 6)
        yield entries


def _texts_block(batch: dict[str, np.ndarray], reader: _Reader) -> dict[str, Any]:
    records = reader.records(batch)
    return {ROW: np.asarray(batch[ROW], np.int64),
            "id": np.array([r.id for r in records], dtype=object),
            "text": np.array([r.text for r in records], dtype=object)}


def _embed(reader: _Reader, output: RayOutput, report_path, *, opts: Any,
           ids: bool = False) -> list:
    from ctxkit.distributed.embedding import embed
    from ctxkit.io.records import atomic_write, write_json

    ds, n = reader.dataset()
    texts = ds.map_batches(_texts_block, fn_kwargs={"reader": reader}, batch_format="numpy")
    vecs = embed(texts, column="text", id_column=ROW, carry_columns=["id"] if ids else [],
                 options=opts)
    if output.kind == "parquet":
        rows = [("texts", n), ("output", write_dataset(vecs.map_batches(
            _vector_table, batch_format="numpy", fn_kwargs={"ids": ids}), output))]
    else:
        path = output.path
        got: dict[str, list] = {ROW: [], "embedding": [], "id": []}
        for batch in vecs.iter_batches(batch_size=None, batch_format="numpy"):
            for k in got:
                if k in batch:
                    got[k].append(batch[k])
        order = np.argsort(np.concatenate(got[ROW]))
        matrix = np.ascontiguousarray(np.concatenate(got["embedding"])[order], dtype="<f4")
        with atomic_write(path, "wb", encoding=None) as fh:
            np.save(fh, matrix)
        rows = [("texts", len(matrix)), ("dim", matrix.shape[1]), ("output", str(path))]
        if ids:
            ids_path = path.with_name(path.name + ".ids.jsonl")
            # the local command writes one JSON string per line: the same bytes
            with atomic_write(ids_path) as fh:
                fh.writelines(_json_line(i) for i in np.concatenate(got["id"])[order].tolist())
            rows.append(("ids", str(ids_path)))
    if report_path is not None:
        write_json(report_path, {"texts": n, "output": output.target, **{
            k: v for k, v in opts.to_dict().items() if k != "model"}})
    return rows


def _json_line(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False) + "\n"


def _vector_table(batch: dict[str, np.ndarray], ids: bool) -> Any:
    """The local command's columns (``id`` with ``--ids``, ``embedding`` as a fixed-size
    list) plus ``row``, the input row number: part files do not keep the input order."""
    import pyarrow as pa

    vecs = np.ascontiguousarray(batch["embedding"], dtype=np.float32)
    flat = pa.array(vecs.reshape(-1), type=pa.float32())
    cols = {"id": pa.array(batch["id"].tolist(), pa.string())} if ids else {}
    cols["embedding"] = pa.FixedSizeListArray.from_arrays(flat, vecs.shape[1])
    cols["row"] = pa.array(np.asarray(batch[ROW], np.int64))
    return pa.table(cols)


def _tokenize_block(batch: dict[str, np.ndarray], reader: _Reader, tokenizer: str,
                    masked: bool) -> dict[str, Any]:
    """Token ids (and, for alpaca without ``train_on_prompt``, the completion mask) as the
    local ``ctxkit pack`` makes them."""
    from ctxkit.io.tokenizers import get_tokenizer

    tok = get_tokenizer(tokenizer)
    records = reader.records(batch)
    ids = np.empty(len(records), dtype=object)
    masks = np.empty(len(records), dtype=object)
    if masked:
        prompts = tok.encode_batch([r.prompt or "" for r in records])
        completions = tok.encode_batch([r.completion or "" for r in records])
        for i, (p, c) in enumerate(zip(prompts, completions)):
            ids[i] = np.asarray(p + c, dtype=np.int64)
            masks[i] = np.r_[np.zeros(len(p), bool), np.ones(len(c), bool)]
    else:
        for i, t in enumerate(tok.encode_batch([r.text for r in records])):
            ids[i] = np.asarray(t, dtype=np.int64)
    out = {ROW: np.asarray(batch[ROW], np.int64), "input_ids": ids,
           "id": np.array([r.id for r in records], dtype=object)}
    if masked:
        out["completion_mask"] = masks
    return out


def _pack(reader: _Reader, output: RayOutput, report_path, *, opts: Any,
          tokenizer: str = "cl100k_base", separator: str | None = None,
          train_on_prompt: bool = False, mode: str = "global") -> list:
    from ctxkit.distributed.packing import pack, window_utilization
    from ctxkit.io.records import write_json
    from ctxkit.jobs.common import load_tokenizer
    from ctxkit.jobs.pack import parse_separator

    tok = load_tokenizer(tokenizer)  # fail here, once, rather than in every worker
    if separator is not None:  # as the CLI says it: eos, none or an id
        opts = opts.replace(separator_id=parse_separator(separator, tok))
    masked = reader.template == "alpaca" and not train_on_prompt
    ds, n = reader.dataset()
    tokens = ds.map_batches(_tokenize_block, batch_format="numpy", fn_kwargs={
        "reader": reader, "tokenizer": tokenizer, "masked": masked}).drop_columns([ROW])
    out = pack(tokens, column="input_ids", mask_column="completion_mask" if masked else None,
               id_column="id", options=opts, mode=mode)
    windows = out.windows.materialize()
    where = write_dataset(windows, output)
    stats = out.stats or window_utilization(windows, opts.capacity)
    skipped = out.skipped.count()
    if report_path is not None:
        write_json(report_path, {"output": where, "tokenizer": tokenizer, "mode": mode,
                                 "records": n, **opts.to_dict(), **stats})
    return [("mode", mode), ("records", n), ("windows", stats["windows"]),
            ("tokens", stats["tokens"]), ("utilization", stats["utilization"]),
            ("skipped (empty/dropped)", skipped), ("output", where)]

