"""Reading records: JSONL, JSON documents and Parquet, validated, with real locations.

Every record keeps an ``id`` so later stages can report what they dropped by the id a user
recognises (:func:`record_id`: its ``--id-field`` value; without one, its own ``id`` field
when that is a string or an integer; else its 0-based position in the file), and its
:class:`~ctxkit.errors.Location`: the real line of a JSONL line or of a JSON array element
(with the element's index), or the row of a Parquet file. A bad record either raises
:class:`RecordError` naming that location, or, with ``on_error="skip"``, is listed in the
:class:`ReadReport` with its reason; it is never lost silently. Writers live in
:mod:`ctxkit.io.outputs` (re-exported here).

Example:
    >>> import json, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write(json.dumps({"text": "hello"}) + "\\n")
    >>> [r.text for r in read_records(path, field="text")]
    ['hello']
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxkit.errors import InputError, InputNotFoundError, Location, RecordError
from ctxkit.io.messages import MESSAGE_KEYS, normalize_messages
from ctxkit.io.outputs import atomic_write, write_json, write_jsonl, write_parquet, write_records
from ctxkit.options import bad_option

__all__ = [
    "Record",
    "RecordError",
    "ReadReport",
    "read_records",
    "check_input",
    "record_from_dict",
    "record_id",
    "format_alpaca_prompt",
    "normalize_messages",
    "atomic_write",
    "write_jsonl",
    "write_json",
    "write_parquet",
    "write_records",
    "TEMPLATES",
]

TEMPLATES = ("alpaca", "messages")
ID_FIELD = "id"  # a record's own id, used when no id field is given (see record_id)
# keys of a top-level JSON object that may wrap the records (see _iter_json)
WRAPPER_KEYS = ("data", "records")
_ALPACA_OUTPUT_KEYS = ("output", "response", "completion")
_WS = re.compile(r"[ \t\n\r]*")
_BOM = b"\xef\xbb\xbf"  # Windows tools start UTF-8 files with it; JSON forbids it


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
    location: Location | None = field(default=None, repr=False)

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
        return {"source": self.source, "read": self.read,
                "skipped": [e.to_dict() for e in self.skipped]}


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


def record_id(own: Any, index: int) -> str:
    """The id of a record read without an id field: ``own`` (its ``id`` field) when it is a
    string or an integer, else its 0-based position ``index`` (a missing or null ``id``, or
    one of another type: a position is then the only id that names it reliably).

    Example:
        >>> record_id("doc-7", 3), record_id(7, 3), record_id(None, 3), record_id([1], 3)
        ('doc-7', '7', '3', '3')
    """
    if isinstance(own, str) or (isinstance(own, int) and not isinstance(own, bool)):
        return str(own)
    return str(index)


def _template_hint(obj: Mapping[str, Any]) -> str:
    """Which template reads a record that lacks the text field, when its keys say so."""
    if "instruction" in obj and any(k in obj for k in _ALPACA_OUTPUT_KEYS):
        return " (it has 'instruction' and 'output': the alpaca template reads it)"
    key = next((k for k in MESSAGE_KEYS if k in obj), None)
    return "" if key is None else f" (it has {key!r}: the messages template reads it)"


def record_from_dict(
    obj: Any,
    *,
    index: int,
    source: str = "<data>",
    line: int | None = None,
    field: str | None = None,
    template: str | None = None,
    id_field: str | None = None,
    location: Location | None = None,
) -> Record:
    """Validate one parsed object into a :class:`Record` or raise :class:`RecordError`.

    ``location`` (default: ``source`` and ``line``) is where the record is, for messages.
    """
    if field is None and template is None:
        field = "text"
    if template is not None and template not in TEMPLATES:
        raise InputError(f"unknown template {template!r}; choose one of {', '.join(TEMPLATES)}")
    loc = location if location is not None else Location(source, line)
    rid = str(index)

    def bad(reason: str) -> RecordError:
        return RecordError(loc.source, loc.line, reason, rid, element=loc.element, row=loc.row,
                           index=index)

    if not isinstance(obj, Mapping):
        raise bad(f"expected a JSON object, got {type(obj).__name__}")
    if id_field is not None:
        if id_field not in obj:
            raise bad(f"missing id field {id_field!r}")
        rid = str(obj[id_field])
    else:
        rid = record_id(obj.get(ID_FIELD), index)
    raw = dict(obj)
    line = loc.line
    if template == "alpaca":
        instruction = obj.get("instruction")
        output_key = next((k for k in _ALPACA_OUTPUT_KEYS if k in obj), None)
        if not isinstance(instruction, str) or output_key is None:
            raise bad("alpaca template needs 'instruction' and 'output' text fields")
        input_text = obj.get("input") or ""
        output = obj[output_key]
        if not isinstance(input_text, str) or not isinstance(output, str):
            raise bad("alpaca 'input'/'output' must be text")
        prompt = format_alpaca_prompt(instruction, input_text)
        return Record(id=rid, text=_unicode(prompt + output, bad), line=line, prompt=prompt,
                      raw=raw, location=loc)
    if template == "messages":
        key = next((k for k in MESSAGE_KEYS if k in obj), None)
        if key is None:
            raise bad(f"messages template needs one of {', '.join(MESSAGE_KEYS)}")
        try:
            messages = normalize_messages(obj[key])
        except (ValueError, TypeError) as exc:
            raise bad(str(exc)) from None
        text = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        return Record(id=rid, text=_unicode(text, bad), line=line, messages=messages, raw=raw,
                      location=loc)
    if field not in obj:
        raise bad(f"missing field {field!r}{_template_hint(obj)}")
    value = obj[field]
    if not isinstance(value, str):
        raise bad(f"field {field!r} is {type(value).__name__}, not text")
    return Record(id=rid, text=_unicode(value, bad), line=line, raw=raw, location=loc)


def _unicode(text: str, bad: Any) -> str:
    """``text``, or ``bad(reason)`` raised when it holds a lone surrogate (JSON's "\\ud800"
    escape decodes to one): no stage can encode it, so the record names where it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad(f"text has a lone surrogate (U+{ord(text[exc.start]):04X}) at character "
                  f"{exc.start}: not valid Unicode") from None
    return text


Row = tuple[Location, Any, "str | None"]  # where, parsed object (or None), error (or None)


def _iter_jsonl(path: Path) -> Iterator[Row]:
    """One row per non-blank line, with its 1-based line number."""
    source = str(path)
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                raw = raw.removeprefix(_BOM)
            if not raw.strip():
                continue
            loc = Location(source, lineno)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield loc, None, f"not valid UTF-8 (byte {exc.start})"
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                yield loc, None, f"invalid JSON: {exc.msg} (column {exc.colno})"
            except RecursionError:  # the parser recurses once per level
                yield loc, None, "invalid JSON: nested too deeply"
            else:
                yield loc, obj, None


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(str(path), None, f"not valid UTF-8 (byte {exc.start})") from None


def _json_error(path: Path, exc: json.JSONDecodeError) -> RecordError:
    return RecordError(str(path), exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})")


def _iter_json_array(path: Path, text: str, start: int) -> Iterator[Row]:
    """Elements of the top-level array at ``text[start] == "["``, each with its real line."""
    decoder = json.JSONDecoder()
    source, line, counted = str(path), 1, 0
    i = _WS.match(text, start + 1).end()
    element = 0
    if text.startswith("]", i):
        i += 1
    else:
        while True:
            try:
                obj, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                raise _json_error(path, exc) from None
            except RecursionError:  # the parser recurses once per level; no end to skip to
                raise RecordError(source, text.count("\n", 0, i) + 1, f"invalid JSON: element "
                                  f"{element} is nested too deeply", element=element) from None
            line += text.count("\n", counted, i)
            counted = i
            yield Location(source, line, element=element), obj, None
            element += 1
            i = _WS.match(text, end).end()
            if text.startswith(",", i):
                i = _WS.match(text, i + 1).end()
            elif text.startswith("]", i):
                i += 1
                break
            else:
                lineno = text.count("\n", 0, i) + 1
                raise RecordError(source, lineno, "invalid JSON: expected ',' or ']' after "
                                  f"element {element - 1}")
    if _WS.match(text, i).end() != len(text):
        raise RecordError(source, text.count("\n", 0, i) + 1,
                          "invalid JSON: extra data after the array")


def _record_keys(field: str | None, template: str | None) -> tuple[str, ...]:
    """Keys whose presence makes a top-level JSON object a record (see :func:`_iter_json`)."""
    if template == "alpaca":
        return ("instruction",)
    if template == "messages":
        return MESSAGE_KEYS
    return (field or "text",)


def _iter_json(path: Path, record_keys: tuple[str, ...] = ("text",)) -> Iterator[Row]:
    """A JSON document: an array of records, a wrapper object, or one record.

    A top-level object is one record, whatever lists of objects it holds (a document's
    ``chunks`` stay inside it). It is a wrapper only when it has none of ``record_keys`` (the
    text field, or the template's keys) and exactly one of :data:`WRAPPER_KEYS` holds a list:
    then that list's elements are the records (``{"version": ..., "data": [...]}`` as SQuAD
    and ``datasets.load_dataset("json", field="data")`` use it) and its other keys are
    metadata.
    """
    text = _read_text(path)
    start = _WS.match(text).end()
    if text.startswith("[", start):
        yield from _iter_json_array(path, text, start)
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc) from None
    except RecursionError:
        raise RecordError(str(path), 1 + text.count("\n", 0, start),
                          "invalid JSON: nested too deeply") from None
    if isinstance(data, Mapping):
        wrappers = [k for k in WRAPPER_KEYS if isinstance(data.get(k), list)]
        if len(wrappers) == 1 and not any(k in data for k in record_keys):
            for element, obj in enumerate(data[wrappers[0]]):  # lines unknown inside it
                yield Location(str(path), element=element), obj, None
            return
        yield Location(str(path), 1 + text.count("\n", 0, start)), data, None
        return
    raise RecordError(str(path), None, "a .json file must hold an array of records or an "
                      f"object, not {type(data).__name__}")


def _iter_parquet(path: Path) -> Iterator[Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=8192)
    except (pa.ArrowInvalid, OSError) as exc:
        raise RecordError(str(path), None, f"not a readable Parquet file: {exc}") from None
    row = 0
    for batch in batches:
        for obj in batch.to_pylist():
            yield Location(str(path), row=row), obj, None
            row += 1


def _is_single_document(fh: Any) -> bool:
    """True when nothing but whitespace follows the first line of ``fh``."""
    while chunk := fh.read(1 << 16):
        if chunk.strip():
            return False
    return True


def _format_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        # Many ".json" files are really JSON lines: objects each alone on a line. A file of
        # one line is a JSON document (``{"data": [...]}`` must not become one record).
        with open(path, "rb") as fh:
            first = fh.readline().removeprefix(_BOM)
            if first.lstrip().startswith(b"{") and not _is_single_document(fh):
                try:
                    json.loads(first)
                    return "jsonl"
                except (json.JSONDecodeError, UnicodeDecodeError):
                    pass
        return "json"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise RecordError(str(path), None, "unknown format; use .jsonl, .json or .parquet")


def check_input(path: str | os.PathLike) -> Path:
    """``path`` as a Path if it is a readable file, else an :class:`InputError`.

    Example:
        >>> check_input("/no/such/file.jsonl")
        Traceback (most recent call last):
        ...
        ctxkit.errors.InputNotFoundError: input file not found: /no/such/file.jsonl
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a str or os.PathLike naming a file, got "
                         f"{type(path).__name__}")
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(path)
    if path.is_dir():
        raise InputError(f"input {path} is a directory; give a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"input {path} is not readable (permission denied)")
    return path


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
    file and line (``element N`` of a JSON array, ``row N`` of a Parquet file); ``"skip"``
    records it in ``report.skipped`` and goes on. JSONL and Parquet are streamed; a JSON
    document is parsed whole: an array of records, or one object, which is one record unless
    it is a ``{"data": [...]}`` or ``{"records": [...]}`` wrapper without the text field (the
    rule of :func:`_iter_json`), so a record's own lists of objects never replace it. A
    missing input is an ``InputNotFoundError`` (also a
    ``FileNotFoundError``), a directory an ``InputError``.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.jsonl")
        >>> with open(path, "w") as f:
        ...     _ = f.write('{"text": "ok"}\\nnot json\\n{"text": "fine"}\\n')
        >>> report = ReadReport()
        >>> [r.text for r in read_records(path, field="text", on_error="skip", report=report)]
        ['ok', 'fine']
        >>> report.n_skipped
        1
    """
    if on_error not in ("raise", "skip"):
        raise bad_option("on_error", f" must be 'raise' or 'skip', got {on_error!r}")
    path = check_input(path)
    report = report if report is not None else ReadReport()
    report.source = str(path)
    fmt = _format_of(path)
    if fmt == "json":
        rows = _iter_json(path, _record_keys(field, template))
    else:
        rows = {"jsonl": _iter_jsonl, "parquet": _iter_parquet}[fmt](path)
    for index, (loc, obj, error) in enumerate(rows):
        try:
            if error is not None:
                raise RecordError(loc.source, loc.line, error, str(index), element=loc.element,
                                  row=loc.row, index=index)
            record = record_from_dict(obj, index=index, field=field, template=template,
                                      id_field=id_field, location=loc)
        except RecordError as exc:
            if on_error == "raise":
                raise
            report.skipped.append(exc)
            continue
        report.read += 1
        yield record
