"""Reading and writing records: JSONL, JSON arrays and Parquet, validated with line numbers.

Every record keeps an ``id`` (its ``--id-field`` value, else its 0-based position in the
file) so later stages can report what they dropped by the id a user recognises. A bad record
either raises :class:`RecordError` naming the file and line, or, with ``on_error="skip"``, is
listed in the :class:`ReadReport` with its reason; it is never lost silently.

Example:
    >>> import json, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write(json.dumps({"text": "hello"}) + "\\n")
    >>> [r.text for r in read_records(path, field="text")]
    ['hello']
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Record",
    "RecordError",
    "ReadReport",
    "read_records",
    "record_from_dict",
    "format_alpaca_prompt",
    "normalize_messages",
    "atomic_write",
    "write_jsonl",
    "write_json",
    "write_parquet",
    "TEMPLATES",
]

TEMPLATES = ("alpaca", "messages")
_ALPACA_OUTPUT_KEYS = ("output", "response", "completion")
_MESSAGE_KEYS = ("messages", "conversations", "conversation", "dialog")
_ROLE_ALIASES = {"human": "user", "gpt": "assistant", "bot": "assistant", "model": "assistant"}


class RecordError(ValueError):
    """A record that cannot be used, with where it is and why."""

    def __init__(self, source: str, line: int | None, reason: str, record_id: str | None = None):
        self.source, self.line, self.reason, self.record_id = source, line, reason, record_id
        where = f"{source}:{line}" if line is not None else source
        rid = f" (id {record_id})" if record_id is not None else ""
        super().__init__(f"{where}{rid}: {reason}")


@dataclass
class Record:
    """One usable record.

    ``text`` is what text stages work on. With the ``alpaca`` template ``prompt`` is the part
    that packing may mask out of the loss and ``text == prompt + completion``. With the
    ``messages`` template ``messages`` holds ``{"role", "content"}`` turns.
    """

    id: str
    text: str
    line: int | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def completion(self) -> str | None:
        return None if self.prompt is None else self.text[len(self.prompt):]

    @property
    def content(self) -> str:
        """The record's own words, without a prompt template's boilerplate.

        For the ``alpaca`` template: instruction, input and output joined by newlines (the
        template's fixed wording would make every pair of records look alike to dedup).
        Otherwise ``text``.
        """
        if self.prompt is None:
            return self.text
        parts = (self.raw.get("instruction"), self.raw.get("input"), self.completion)
        return "\n".join(p for p in parts if p)


@dataclass
class ReadReport:
    """What reading saw: good records, and each skipped one with its line and reason."""

    source: str = ""
    read: int = 0
    skipped: list[RecordError] = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "read": self.read,
            "skipped": [
                {"line": e.line, "id": e.record_id, "reason": e.reason} for e in self.skipped
            ],
        }


def format_alpaca_prompt(instruction: str, input_text: str = "") -> str:
    """The Stanford Alpaca prompt; the response follows it directly.

    Example:
        >>> format_alpaca_prompt("Add 2 and 3").splitlines()[-1]
        '### Response:'
    """
    if input_text:
        return (
            "Below is an instruction that describes a task, paired with an input that provides "
            "further context. Write a response that appropriately completes the request.\n\n"
            f"### Instruction:\n{instruction}\n\n### Input:\n{input_text}\n\n### Response:\n"
        )
    return (
        "Below is an instruction that describes a task. Write a response that appropriately "
        f"completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
    )


def normalize_messages(turns: Any) -> list[dict[str, Any]]:
    """OpenAI ``{role, content}`` or ShareGPT ``{from, value}`` turns to ``{role, content}``.

    Extra keys (``tool_calls``, ``tool_call_id``, ``name``) are kept.

    Example:
        >>> normalize_messages([{"from": "human", "value": "hi"}])
        [{'role': 'user', 'content': 'hi'}]
    """
    if not isinstance(turns, list):
        raise ValueError(f"messages must be a list of turns, got {type(turns).__name__}")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, Mapping):
            raise ValueError(f"turn {i} is not an object")
        role = turn.get("role", turn.get("from", turn.get("sender")))
        content = turn.get("content", turn.get("value", turn.get("text")))
        if role is None:
            raise ValueError(f"turn {i} has no role/from field")
        if content is None:
            content = ""
        if isinstance(content, list):  # OpenAI content parts: keep the text parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if not isinstance(content, str):
            raise ValueError(f"turn {i} content is {type(content).__name__}, not text")
        rest = {k: v for k, v in turn.items() if k not in ("role", "from", "content", "value")}
        out.append({"role": _ROLE_ALIASES.get(str(role), str(role)), "content": content, **rest})
    return out


def record_from_dict(
    obj: Any,
    *,
    index: int,
    source: str = "<data>",
    line: int | None = None,
    field: str | None = None,
    template: str | None = None,
    id_field: str | None = None,
) -> Record:
    """Validate one parsed object into a :class:`Record` or raise :class:`RecordError`."""
    if field is None and template is None:
        field = "text"
    if template is not None and template not in TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of {TEMPLATES}")
    rid = str(index)
    if not isinstance(obj, Mapping):
        raise RecordError(source, line, f"expected a JSON object, got {type(obj).__name__}", rid)
    if id_field is not None:
        if id_field not in obj:
            raise RecordError(source, line, f"missing id field {id_field!r}", rid)
        rid = str(obj[id_field])
    raw = dict(obj)
    if template == "alpaca":
        instruction = obj.get("instruction")
        output_key = next((k for k in _ALPACA_OUTPUT_KEYS if k in obj), None)
        if not isinstance(instruction, str) or output_key is None:
            raise RecordError(
                source, line, "alpaca template needs 'instruction' and 'output' text fields", rid
            )
        input_text = obj.get("input") or ""
        output = obj[output_key]
        if not isinstance(input_text, str) or not isinstance(output, str):
            raise RecordError(source, line, "alpaca 'input'/'output' must be text", rid)
        prompt = format_alpaca_prompt(instruction, input_text)
        return Record(id=rid, text=prompt + output, line=line, prompt=prompt, raw=raw)
    if template == "messages":
        key = next((k for k in _MESSAGE_KEYS if k in obj), None)
        if key is None:
            raise RecordError(source, line, f"messages template needs one of {_MESSAGE_KEYS}", rid)
        try:
            messages = normalize_messages(obj[key])
        except ValueError as exc:
            raise RecordError(source, line, str(exc), rid) from None
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        return Record(id=rid, text=text, line=line, messages=messages, raw=raw)
    if field not in obj:
        raise RecordError(source, line, f"missing field {field!r}", rid)
    value = obj[field]
    if not isinstance(value, str):
        raise RecordError(
            source, line, f"field {field!r} is {type(value).__name__}, not text", rid
        )
    return Record(id=rid, text=value, line=line, raw=raw)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """Yield (line number, parsed object or None, error or None); blank lines are skipped."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield lineno, None, f"not valid UTF-8 (byte {exc.start})"
                continue
            try:
                yield lineno, json.loads(text), None
            except json.JSONDecodeError as exc:
                yield lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})"


def _iter_json(path: Path) -> Iterator[tuple[int | None, Any, str | None]]:
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordError(str(path), None, f"not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise RecordError(str(path), exc.lineno, f"invalid JSON: {exc.msg}") from None
    if isinstance(data, Mapping):  # {"data": [...]} or a single record
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 and "messages" not in data else [data]
    if not isinstance(data, list):
        raise RecordError(str(path), None, "a .json file must hold an array of records")
    for obj in data:
        yield None, obj, None


def _iter_parquet(path: Path) -> Iterator[tuple[int | None, Any, str | None]]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):
        yield from ((None, row, None) for row in batch.to_pylist())


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        # Many ".json" files are really JSON lines: an object whose first line parses alone.
        with open(path, "rb") as fh:
            first = fh.readline()
        if first.lstrip().startswith(b"{"):
            try:
                json.loads(first)
                return "jsonl"
            except (json.JSONDecodeError, UnicodeDecodeError):
                pass
        return "json"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise RecordError(str(path), None, "unknown format; use .jsonl, .json or .parquet")


def read_records(
    path: str | os.PathLike,
    *,
    field: str | None = None,
    template: str | None = None,
    id_field: str | None = None,
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[Record]:
    """Stream records from a JSONL, JSON or Parquet file.

    ``on_error="raise"`` stops at the first bad record with a :class:`RecordError` naming the
    file and line; ``"skip"`` records it in ``report.skipped`` and goes on. JSONL and Parquet
    are streamed; a JSON array is parsed whole.

    Example:
        >>> report = ReadReport()
        >>> # good = list(read_records("x.jsonl", field="text", on_error="skip", report=report))
    """
    if on_error not in ("raise", "skip"):
        raise ValueError("on_error must be 'raise' or 'skip'")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"input file not found: {path}")
    report = report if report is not None else ReadReport()
    report.source = str(path)
    fmt = _format_of(path)
    rows = {"jsonl": _iter_jsonl, "json": _iter_json, "parquet": _iter_parquet}[fmt](path)
    for index, (line, obj, error) in enumerate(rows):
        try:
            if error is not None:
                raise RecordError(str(path), line, error, str(index))
            record = record_from_dict(
                obj, index=index, source=str(path), line=line if line is not None else index,
                field=field, template=template, id_field=id_field,
            )
        except RecordError as exc:
            if on_error == "raise":
                raise
            report.skipped.append(exc)
            continue
        report.read += 1
        yield record


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary file beside ``path``; rename it over ``path`` only on success.

    Example:
        >>> import tempfile, os
        >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
        >>> with atomic_write(target) as fh:
        ...     _ = fh.write("done")
        >>> open(target).read()
        'done'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp makes the file private (0600); give it the mode a plain open() would have
    os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding, "newline": "\n"}
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_jsonl(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write rows as JSON lines atomically; returns the number written."""
    n = 0
    with atomic_write(path) as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=_jsonable))
            fh.write("\n")
            n += 1
    return n


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write one JSON document atomically (indented, UTF-8)."""
    with atomic_write(path) as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2, default=_jsonable)
        fh.write("\n")


def write_parquet(path: str | os.PathLike, columns_or_batches: Any) -> int:
    """Write a dict of columns, a pyarrow Table, or an iterable of either, atomically.

    An iterable is written batch by batch, so output can be streamed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    def as_table(obj: Any) -> pa.Table:
        return obj if isinstance(obj, pa.Table) else pa.table(obj)

    if isinstance(columns_or_batches, (Mapping, pa.Table)):
        columns_or_batches = [columns_or_batches]
    n = 0
    writer = None
    with atomic_write(path, "wb") as fh:
        for part in columns_or_batches:
            table = as_table(part)
            if writer is None:
                writer = pq.ParquetWriter(fh, table.schema)
            writer.write_table(table)
            n += table.num_rows
        if writer is None:
            raise ValueError("nothing to write")
        writer.close()
    return n
