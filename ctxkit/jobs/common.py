"""What every job shares: where records come from, where results go, the report, progress.

A job never prints. It validates its options (raising :class:`~ctxkit.errors.InputError`),
reads through :class:`Source`, writes through :class:`Target` (all outputs staged and
committed together, only when the job succeeded) and returns a :class:`JobReport`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ctxkit.errors import InputError, OptionError
from ctxkit.io.outputs import StagedOutputs, staged_outputs
from ctxkit.io.records import TEMPLATES, ReadReport, Record, check_input, read_records
from ctxkit.packing.options import MAX_CAPACITY  # one limit for every entry point

__all__ = [
    "DEFAULT_TOKENIZER",
    "MAX_CAPACITY",
    "JobReport",
    "Progress",
    "Source",
    "Target",
    "as_flags",
    "check_capacity",
    "check_suffix",
    "load_models",
    "load_tokenizer",
    "no_progress",
    "read_text_file",
    "require_records",
]

DEFAULT_TOKENIZER = "cl100k_base"  # tiktoken's GPT-4 encoding, shipped offline
Advance = Callable[..., None]
T = TypeVar("T")


class Progress(Protocol):
    """``progress(description, total)`` opens a bar; the context yields ``advance(n=1)``."""

    def __call__(self, description: str, total: int | None = None
                 ) -> AbstractContextManager[Advance]: ...


@contextlib.contextmanager
def no_progress(description: str, total: int | None = None) -> Iterator[Advance]:
    """The default :class:`Progress`: shows nothing."""
    yield lambda n=1: None


@dataclass(frozen=True)
class Source:
    """Records to read: a file, which field (or template) holds the text, and the id field.

    ``skip_bad=True`` lists bad records in the :class:`ReadReport` instead of failing.
    """

    path: Path
    field: str | None = None
    template: str | None = None
    id_field: str | None = None
    skip_bad: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str from Python works too

    def check(self) -> None:
        """Options first, then that the input is a readable file."""
        if self.template is not None and self.template not in TEMPLATES:
            raise OptionError("--template", f"unknown --template {self.template!r}; choose "
                                            f"one of {', '.join(TEMPLATES)}")
        if self.template is not None and self.field is not None:
            raise InputError("give either --template or --field, not both")
        check_input(self.path)

    def records(self, report: ReadReport | None = None) -> Iterator[Record]:
        return read_records(self.path, field=self.field, template=self.template,
                            id_field=self.id_field, on_error="skip" if self.skip_bad else "raise",
                            report=report)


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file: the same resolved path, or (links) ``os.path.samefile``."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _check_parents(path: Path) -> None:
    """The nearest existing ancestor of ``path`` must be a directory we may write in."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot write {path}: {parent} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: {parent} is not writable")


@dataclass(frozen=True)
class Target:
    """Where results go: ``output``, an optional JSON ``report``, and whether the output may
    replace the input (``in_place``)."""

    output: Path
    report: Path | None = None
    in_place: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "output", Path(self.output))
        if self.report is not None:
            object.__setattr__(self, "report", Path(self.report))

    def check(self, inputs: tuple[Path, ...] = (), *, directory: bool = False,
              files: tuple[Path, ...] = ()) -> None:
        """Refuse targets that would lose data or cannot be written: a directory where a file
        goes (or a file where a directory goes), a file where a parent directory must be, and
        any file the job writes landing on an input or on another file it writes.

        ``files`` are the job's other files: those beside the output (``embed``'s
        ``<output>.ids.jsonl``), or those inside the output directory with ``directory``.
        Every one of them, the output and the report is checked against every input, by path
        and by ``os.path.samefile`` (links), before anything is written; only the output may
        replace the input, and only with ``in_place``.
        """
        out = self.output
        for path in (out, self.report):
            if path is not None:
                _check_parents(path)
        if directory:
            if out.exists() and not out.is_dir():
                raise InputError(f"output {out} is an existing file; -o names a directory here")
        elif out.is_dir():
            raise InputError(f"output {out} is a directory; give a file name")
        for path in files:
            _check_parents(path)
        if self.report is not None and self.report.is_dir():
            raise InputError(f"report {self.report} is a directory; give a file name")
        written: list[tuple[str, Path]] = [] if directory else [("output", out)]
        if self.report is not None:
            written.append(("report", self.report))
        written += [("file", f) for f in files]
        for src in inputs:
            for what, path in written:
                if not _same_file(path, src):
                    continue
                if what == "output":
                    if self.in_place:
                        continue
                    raise InputError(f"output {out} is the input file; give another -o",
                                     hint="or --in-place to replace the input")
                raise InputError(f"{what} {path} would overwrite the input {src}; give another "
                                 f"{'--report' if what == 'report' else '-o'}")
        if self.report is not None:  # the job's own files differ by name; the report may not
            for what, path in written:
                if what != "report" and _same_file(self.report, path):
                    raise InputError(f"report {self.report} would overwrite the {what} {path}; "
                                     "give another --report")

    @contextlib.contextmanager
    def staged(self) -> Iterator[tuple[StagedOutputs, Path | None]]:
        """Stage the report file at once (so an unwritable report fails before any work);
        the job stages its outputs on the yielded object. Committed on success only."""
        with staged_outputs() as staged:
            report_tmp = None if self.report is None else staged.path(self.report)
            yield staged, report_tmp


@dataclass
class JobReport:
    """What a job did, for people (:meth:`summary`, ``tables``, ``id_lists``, ``notes``) and
    for machines (:meth:`to_dict`, the ``--report`` JSON).

    Subclasses add the stage's figures and fill ``summary``.
    """

    command: str
    input: str
    output: str
    read: ReadReport = field(default_factory=ReadReport)
    title: str = ""
    tables: list[tuple[str, list[tuple[str, Any]]]] = field(default_factory=list)
    id_lists: list[tuple[str, list[str]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> list[tuple[str, Any]]:
        """``(metric, value)`` rows of the one-screen summary table."""
        return []

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command, "input": self.input, "output": self.output,
                "read": self.read.to_dict()}


def require_records(n: int, source: Source, read: ReadReport) -> None:
    """The empty-input policy, the same for every command: no usable record is an error."""
    if n == 0:
        skipped = f" ({read.n_skipped} skipped as bad)" if read.n_skipped else ""
        raise InputError(f"no records in {source.path}{skipped}; nothing to do")


def nonempty_records(source: Source, read: ReadReport) -> Iterator[Record]:
    """``source.records(read)``, with the first record read now: a bad or missing first
    record, or no record at all, fails before the caller loads a model (the empty-input
    policy of :func:`require_records`)."""
    records = source.records(read)
    first = list(itertools.islice(records, 1))
    require_records(len(first), source, read)
    return itertools.chain(first, records)


def record_query(rec: Record, query: str | None, query_field: str | None,
                 required: bool = False) -> str | None:
    """The query for ``rec``: its ``query_field`` when given, else ``query``. A field that is
    not text is an error naming the record; a missing one is an error when ``required``
    (pairs need a query) and no query otherwise."""
    if query_field is None:
        return query
    q = rec.raw.get(query_field)
    if q is None and not required:
        return None
    if not isinstance(q, str):
        what = "missing" if q is None else f"{type(q).__name__}, not text"
        raise InputError(f"query field {query_field!r} is {what}", location=rec.location,
                         record_id=rec.id)
    return q


def read_text_file(path: Path) -> str:
    """A whole UTF-8 text file; an empty one is an error (the empty-input policy)."""
    check_input(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not valid UTF-8 (byte {exc.start}); convert it to UTF-8 "
                         "first") from None
    if not text.strip():
        raise InputError(f"no text in {path}; nothing to do")
    return text


def load_tokenizer(name: str) -> Any:
    from ctxkit.io.tokenizers import get_tokenizer

    try:
        return get_tokenizer(name)
    except (ValueError, OSError) as exc:
        raise OptionError("--tokenizer", f"cannot load --tokenizer {name!r}: {exc}") from None


def load_models(opts: T) -> T:
    """``opts`` (a compression or chat option set) with its tokenizer and scorer loaded, so a
    run loads each once; a bad name is an :class:`~ctxkit.errors.OptionError` naming the flag."""
    from ctxkit.compression.scoring.registry import get_scorer

    tok = load_tokenizer(opts.tokenizer)
    try:
        sc = get_scorer(opts.scorer)
    except (ValueError, ImportError) as exc:
        raise OptionError("--scorer", f"--scorer: {exc}") from None
    return opts.replace(tokenizer=tok, scorer=sc)


def check_suffix(path: Path, allowed: tuple[str, ...], what: str = "output") -> str:
    """``path``'s lower-case suffix if it is one of ``allowed``, else an error naming them."""
    suffix = path.suffix.lower()
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory; give a file name")
    if suffix not in allowed:
        names = ", ".join(allowed[:-1]) + f" or {allowed[-1]}" if len(allowed) > 1 \
            else allowed[0]
        raise InputError(f"{what} must end in {names}, got {path.name}")
    return suffix


def as_flags(check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``check(*args, **kwargs)`` (an option class or a checker), with an
    :class:`~ctxkit.errors.OptionError` naming the option as the CLI does (``--keep-last``).

    Example:
        >>> from ctxkit.packing.options import PackOptions
        >>> as_flags(PackOptions, capacity=64).capacity
        64
    """
    from ctxkit.options import cli_option_error

    try:
        return check(*args, **kwargs)
    except OptionError as exc:
        raise cli_option_error(exc) from None


def check_capacity(capacity: int) -> int:
    from ctxkit.packing.options import check_capacity as check

    return as_flags(check, capacity)
