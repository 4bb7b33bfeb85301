"""File-level pipelines: read records, run one stage, write the output and the report.

Every ``ctxkit`` command is a thin wrapper over one function here; each takes a
:class:`Source` (input file, text field or template, id field, ``skip_bad``), a
:class:`Target` (output, optional ``--report`` path, ``in_place``) and the stage's options,
and returns a :class:`JobReport` subclass. Jobs never print and never exit: bad input or
options raise :class:`ctxkit.errors.InputError` (one line, naming the record's location),
so they are tested without the CLI runner.

Adding a command
----------------
1. Write ``run_<stage>(source, target, *, <options>, progress=no_progress) -> <Stage>Report``
   in ``ctxkit/jobs/<stage>.py``. In order: validate options (raise ``OptionError`` naming
   the flag), ``source.check()``, ``target.check((source.path,), files=...)`` (``files``:
   every other file the job writes, so none lands on an input), then do the work inside
   ``with target.staged() as (staged, report_tmp):`` writing the output to
   ``staged.path(target.output)`` (pass ``fmt=target.output.suffix`` to ``write_records``)
   and the report JSON to ``report_tmp`` when it is not None. Nothing is replaced unless the
   whole block succeeds. Apply the empty-input policy with ``require_records``.
2. The report dataclass subclasses :class:`JobReport`: ``summary()`` gives the rows of the
   one-screen table, ``to_dict()`` the ``--report`` JSON; breakdowns go in ``tables``
   (``(title, [(code, count)])``), record id lists in ``id_lists``, closing lines in ``notes``.
   Reasons are codes from the library results (``Unit.code``, ``MessageChange.code``), never
   prose parsed back.
3. Export it below, and add a ``@app.command`` in ``ctxkit/cli/<group>.py`` that only declares the
   options, builds ``Source``/``Target`` (``source_of``/``target_of``) and calls
   ``render(run_<stage>(...))``. Keep the shared flags' names: ``-o/--output``, ``--report``,
   ``--field``, ``--template``, ``--id-field``, ``--skip-bad``, ``--in-place``,
   ``--progress/--no-progress``.
4. Add its bad-input cases to ``tests/test_bad_input.py``.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "in.jsonl").write_text(json.dumps({"text": "a b c"}) + "\\n")
    >>> run_pack(Source(d / "in.jsonl"), Target(d / "out.parquet"), capacity=8).windows
    1
"""

from ctxkit.jobs.chat import ChatReport, run_chat
from ctxkit.jobs.classify import ClassifyReport, run_classify
from ctxkit.jobs.common import JobReport, Progress, Source, Target, no_progress
from ctxkit.jobs.compress import CompressReport, run_compress
from ctxkit.jobs.dedup import DedupReport, parse_threshold, run_dedup
from ctxkit.jobs.density import DensityJobReport, run_density
from ctxkit.jobs.embed import EmbedReport, run_embed
from ctxkit.jobs.evaluate import EvalJobReport, run_eval
from ctxkit.jobs.pack import PackReport, run_pack

__all__ = [
    "ChatReport",
    "ClassifyReport",
    "CompressReport",
    "DedupReport",
    "DensityJobReport",
    "EmbedReport",
    "EvalJobReport",
    "JobReport",
    "PackReport",
    "Progress",
    "Source",
    "Target",
    "no_progress",
    "parse_threshold",
    "run_chat",
    "run_classify",
    "run_compress",
    "run_dedup",
    "run_density",
    "run_embed",
    "run_eval",
    "run_pack",
]
