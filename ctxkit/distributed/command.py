"""What ``ctxkit dedup|embed|pack ... --ray ADDRESS`` runs: read, run the stage on Ray, write.

The CLI parses its options as usual and hands them to :func:`run_command`, which connects to
Ray (``ADDRESS``: ``local`` starts a local instance, ``auto`` joins the cluster this machine
belongs to, ``ray://head:10001`` a remote one), reads the input with Ray Data's readers (a
``.jsonl``/``.json``/``.parquet`` file, a directory of them, or a cloud URI), runs the stage
and writes the result. Outputs are written by the workers: a path ending in ``.parquet`` or
``.jsonl`` becomes a *directory* of part files of that format (one per block). Small outputs
are written by the driver, atomically: the dedup report (``--report``, one entry per removed
record) and ``.npy`` embeddings (collected in input order; use ``.parquet`` for big corpora).
It returns ``(metric, value)`` rows for the CLI's summary table.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from ctxkit.distributed.cluster import init_ray, require_ray
from ctxkit.distributed.rows import ROW

__all__ = ["COMMANDS", "read_dataset", "run_command"]

COMMANDS = ("dedup", "embed", "pack")
_FORMATS = {".jsonl": "json", ".ndjson": "json", ".json": "json", ".parquet": "parquet",
            ".pq": "parquet"}


def _uri(path: str | Path) -> str:
    """``path`` as a string; restores the ``//`` of a URI that ``pathlib.Path`` collapsed."""
    text = str(path)
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", r"\1://", text)


def _format_of(path: str) -> str:
    p = Path(path)
    if p.is_dir():
        found = {_FORMATS[f.suffix.lower()] for f in p.iterdir() if f.suffix.lower() in _FORMATS}
        if len(found) != 1:
            raise ValueError(f"directory {path} must hold .jsonl/.json or .parquet files, one kind")
        return found.pop()
    suffix = p.suffix.lower()
    if suffix not in _FORMATS:
        raise ValueError(f"input must be .jsonl, .json or .parquet (file or directory), got {path}")
    if "://" not in path and not p.exists():
        raise ValueError(f"input file not found: {path}")
    return _FORMATS[suffix]


def read_dataset(path: str | Path, columns: list[str]) -> Any:
    """A Ray dataset over ``path`` (file, directory or URI), checked to have ``columns``."""
    ray = require_ray()
    path = _uri(path)
    if _format_of(path) == "parquet":
        ds = ray.data.read_parquet(path)
    else:
        ds = ray.data.read_json(path, lines=not path.endswith(".json"))
    names = ds.columns() or []
    missing = [c for c in columns if c not in names]
    if missing:
        raise ValueError(f"field(s) {missing} not in {path} (fields: {names})")
    return ds


def _write(ds: Any, output: Path) -> str:
    """Write ``ds`` as a directory of part files named after ``output``'s suffix."""
    kind = _FORMATS.get(output.suffix.lower())
    if kind is None:
        raise ValueError(f"output must end in .parquet or .jsonl, got {output}")
    target = _uri(output)
    if "://" not in target and output.exists() and (output.is_file() or any(output.iterdir())):
        raise ValueError(f"output {output} exists; Ray writes a directory of part files there")
    if kind == "parquet":
        ds.write_parquet(target)
    else:
        ds.write_json(target)
    return f"{target}/ (part files)"


def run_command(
    command: str,
    address: str | None,
    input_path: str | Path,
    output: str | Path,
    *,
    field: str | None = None,
    id_field: str | None = None,
    report_path: str | Path | None = None,
    **options: Any,
) -> list[tuple[str, Any]]:
    """Run ``ctxkit <command>`` on Ray; returns rows for the summary table.

    Options by command (the CLI's own names):

    - ``dedup``: ``method`` (only ``"minhash"`` is distributed), ``threshold``, ``keep``,
      ``num_perm``, ``ngram``, ``unit``, ``seed``, ``punctuation``;
    - ``embed``: ``model`` (a directory every node can read), ``batch_size`` (texts per
      actor call), ``normalize``, ``device``, ``dtype``, ``batch_tokens``;
    - ``pack``: ``capacity``, ``tokenizer``, ``strategy``, ``overflow``, ``mode``
      (``"global"`` or ``"block"``).

    Raises ``ValueError`` for bad input or options (the CLI prints it as one line) and
    :class:`~ctxkit.distributed.cluster.RayMissingError` when Ray is not installed.
    """
    if command not in COMMANDS:
        raise ValueError(f"--ray supports {COMMANDS}, not {command!r}")
    ray = require_ray()
    init_ray(None if address in (None, "", "local") else address)
    field = field or "text"
    start = time.perf_counter()
    output = Path(output)
    try:
        if command == "dedup":
            rows = _dedup(input_path, output, field, id_field, report_path, **options)
        elif command == "embed":
            rows = _embed(input_path, output, field, id_field, **options)
        else:
            rows = _pack(input_path, output, field, id_field, **options)
    except ray.exceptions.RayError as exc:
        # A bad record raises inside a worker; hand the CLI the worker's own message.
        message = _user_message(exc)
        if message is None:
            raise
        raise ValueError(message) from exc
    seconds = time.perf_counter() - start
    return [("ray cluster CPUs / GPUs", f"{int(ray.cluster_resources().get('CPU', 0))} / "
             f"{int(ray.cluster_resources().get('GPU', 0))}"), *rows, ("seconds", seconds)]


def _user_message(exc: BaseException) -> str | None:
    """The message of the ValueError/TypeError a worker raised, from a Ray task error.

    Ray re-raises a worker's exception as ``RayTaskError(UserCodeException)`` whose text
    holds the remote traceback; the last ``ValueError: ...`` line in it is ours.
    """
    found = re.findall(r"^(?:ValueError|TypeError): (.+)$", str(exc), flags=re.M)
    return found[-1].strip() if found else None


def _dedup(input_path, output, field, id_field, report_path, method="minhash", threshold=None,
           keep="first", num_perm=128, ngram=5, unit="char", seed=1, punctuation=False) -> list:
    from ctxkit.distributed.minhash import minhash_dedup
    from ctxkit.io.records import write_json

    stages = [m.strip() for m in method.split(",")] if isinstance(method, str) else list(method)
    if stages != ["minhash"]:
        raise ValueError(f"with --ray only --method minhash runs distributed, got {method!r} "
                         "(run exact dedup without --ray, or as a first pass)")
    if isinstance(threshold, dict):
        threshold = threshold.get("minhash")
    ds = read_dataset(input_path, [field] + ([id_field] if id_field else []))
    from ctxkit.deduplication.normalize import Normalization

    out = minhash_dedup(ds, column=field, threshold=threshold, num_perm=num_perm,
                        id_column=id_field, ngram=ngram, unit=unit, seed=seed, keep=keep,
                        normalization=Normalization(punctuation=punctuation))
    where = _write(out.kept, output)
    removed = out.report.take_all()
    if report_path is not None:
        write_json(report_path, {"info": out.info, "removed": removed})
    n = out.result.n
    return [("records", n), ("kept", n - len(removed)), ("removed (minhash)", len(removed)),
            ("candidate pairs", out.info["candidates"]), ("verified pairs", out.info["verified"]),
            ("output", where)]


def _embed(input_path, output, field, id_field, model=None, batch_size=1024, normalize=None,
           device="auto", dtype="auto", batch_tokens=None) -> list:
    from ctxkit.distributed.embedding import embed
    from ctxkit.io.records import atomic_write

    ds = read_dataset(input_path, [field] + ([id_field] if id_field else []))
    to_npy = output.suffix.lower() == ".npy"
    # .npy rows follow the input order, so they are keyed by row number; other outputs keep ids.
    kwargs = {"dtype": dtype, "max_tokens_per_batch": batch_tokens}
    vecs = embed(ds, column=field, id_column=None if to_npy else id_field,
                 model=None if model is None else str(model),
                 device=None if device == "auto" else device, encoder_kwargs=kwargs,
                 batch_size=batch_size, normalize=normalize)
    if not to_npy:
        return [("output", _write(vecs, output))]
    rows, arrays = [], []
    for batch in vecs.iter_batches(batch_size=None, batch_format="numpy"):
        rows.append(batch[ROW])
        arrays.append(batch["embedding"])
    order = np.argsort(np.concatenate(rows)) if rows else np.empty(0, np.int64)
    matrix = np.concatenate(arrays)[order] if arrays else np.empty((0, 0), np.float32)
    with atomic_write(output, "wb", encoding=None) as fh:
        np.save(fh, matrix)
    return [("texts", len(matrix)), ("dim", matrix.shape[1] if matrix.ndim == 2 else 0),
            ("output", str(output))]


def _tokenize_block(
    batch: dict[str, np.ndarray], field: str, tokenizer: str, id_field: str | None
) -> dict[str, Any]:
    from ctxkit.io.tokenizers import get_tokenizer

    tok = get_tokenizer(tokenizer)
    texts = batch[field].tolist()
    out = np.empty(len(texts), dtype=object)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            who = f"record {batch[id_field].tolist()[i]!r}" if id_field else f"a record ({t!r:.60})"
            raise ValueError(f"{who}: field {field!r} must hold text, got {type(t).__name__}")
        out[i] = np.asarray(tok.encode(t), dtype=np.int64)
    return {**{k: v for k, v in batch.items() if k != field}, "input_ids": out}


def _pack(input_path, output, field, id_field, capacity=2048, tokenizer="cl100k_base",
          strategy="bfd", overflow="error", mode="global") -> list:
    from ctxkit.distributed.packing import pack, window_utilization

    ds = read_dataset(input_path, [field] + ([id_field] if id_field else []))
    if "input_ids" not in (ds.columns() or []) or field != "input_ids":
        ds = ds.map_batches(_tokenize_block, fn_kwargs={"field": field, "tokenizer": tokenizer,
                                       "id_field": id_field},
                            batch_format="numpy")
    out = pack(ds, int(capacity), column="input_ids", strategy=strategy, mode=mode,
               overflow=overflow)
    windows = out.windows.materialize()
    where = _write(windows, output)
    stats = window_utilization(windows, int(capacity))
    skipped = out.skipped.count()
    return [("mode", mode), ("windows", stats["windows"]), ("tokens", stats["tokens"]),
            ("utilization", stats["utilization"]), ("skipped (empty/dropped)", skipped),
            ("output", where)]
