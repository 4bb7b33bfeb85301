"""The typer app, the options every command shares, and how a command runs its job.

Flags mean one thing across commands: ``-o/--output`` the output, ``--report`` the JSON
report, ``--field`` the text field, ``-t/--tokenizer``, ``-c/--capacity``, ``-b/--budget``,
``-q/--query``; ``tests/test_cli_flags.py`` holds every command to it. Defaults come from the
option classes (:class:`~ctxkit.packing.options.PackOptions`, ...), never written again here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from ctxkit.cli.render import console, out, print_table, progress_bar, render
from ctxkit.errors import InputError, OptionError
from ctxkit.jobs import JobReport, Source, Target
from ctxkit.jobs.common import DEFAULT_TOKENIZER

__all__ = ["DEFAULT_TOKENIZER", "app", "check_seed", "quiet_transformers", "run_job", "run_stage",
           "state"]

def _flags_show_no_type() -> None:
    """A flag takes no value, so its help shows no type (typer prints ``<bool>`` beside
    ``--skip-bad`` and ``--help``): the type column is left empty for flags."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "flags_hidden", False):
        return

    def display_type_rich(self, ctx):  # type: ignore[no-untyped-def]
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    display_type_rich.flags_hidden = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()

app = typer.Typer(
    name="ctxkit",
    help="Make every token of a context window count: dedup, compress, score, pack, embed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
state = {"debug": False}

OutputOpt = Annotated[Path, typer.Option("--output", "-o", help="Output file; its suffix "
                                         "sets the format.")]
ReportOpt = Annotated[Path | None, typer.Option(
    "--report", help="Also write the report as JSON (written only if the run succeeds).")]
FieldOpt = Annotated[str | None, typer.Option("--field", help="Text field (default: text).")]
TemplateOpt = Annotated[str | None, typer.Option("--template", help="alpaca or messages.")]
IdFieldOpt = Annotated[str | None, typer.Option(
    "--id-field", help="Field holding each record's id (default: its own `id` field, a "
                       "string or an integer, else its position).")]
SkipBadOpt = Annotated[bool, typer.Option(
    "--skip-bad", help="Skip invalid records (counted and listed in the report).")]
InPlaceOpt = Annotated[bool, typer.Option(
    "--in-place", help="Allow the output to replace the input file.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress",
                                           help="Show progress bars.")]
TokenizerOpt = Annotated[str, typer.Option(
    "--tokenizer", "-t", help="cl100k_base, minilm or hf:<local dir> (`ctxkit tokenizers`).")]
CapacityOpt = Annotated[int, typer.Option("--capacity", "-c", help="Tokens per context window.")]
BudgetOpt = Annotated[int, typer.Option("--budget", "-b", help="Token budget per text.")]
QueryOpt = Annotated[str | None, typer.Option("--query", "-q", help="Keep what answers this.")]
QueryFieldOpt = Annotated[str | None, typer.Option(
    "--query-field", help="Per-record query field (every record must have it).")]
ScorerOpt = Annotated[str, typer.Option("--scorer", help="embedding | idf | lm")]
DeviceOpt = Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")]
DtypeOpt = Annotated[str, typer.Option(help="auto | fast | float32 | bfloat16 | float16")]
BatchTokensOpt = Annotated[int | None, typer.Option(min=1, help="Token slots per forward pass.")]
ChunkSizeOpt = Annotated[int, typer.Option(min=1, help="Records read, packed and written at a "
                                           "time (bounds memory).")]
RAY_HELP = ("Run on Ray Data: 'local' (start Ray here), 'auto' (this machine's cluster) or "
            "ray://HOST:10001. IN may be a directory or URI; -o is the file written (an "
            "existing directory or a URI gets part files).")
RayOpt = Annotated[str | None, typer.Option("--ray", metavar="ADDRESS", help=RAY_HELP)]
KvModelOpt = Annotated[str | None, typer.Option(
    "--kv-model", metavar="NAME_OR_DIR", help="Also report KV-cache memory for this model: a "
    "preset (llama-3.1-8b, mistral-7b, qwen2.5-7b, gemma-2-9b...), a config.json or a model "
    "directory.")]
KvDtypeOpt = Annotated[str, typer.Option(
    "--kv-dtype", help="KV-cache element type: bfloat16, float16, float32, fp8, int8, int4.")]
KV_DTYPE = "bfloat16"


def refuse_unused(ctx: typer.Context, param: str, flag: str, needed: str,
                  present: bool) -> None:
    """``flag`` written on the command line (not left at its default) does nothing unless
    ``needed`` is given too (``present``): an error naming both, not a silent no-op."""
    source = ctx.get_parameter_source(param)
    if not present and getattr(source, "name", None) in ("COMMANDLINE", "ENVIRONMENT"):
        raise OptionError(flag, f"{flag} does nothing without {needed}; add {needed} or drop "
                                f"{flag}")


def check_seed(seed: int | None) -> None:
    """A seed is an integer >= 0 (numpy's generators take no other)."""
    if seed is not None and seed < 0:
        raise OptionError("--seed", f"--seed must be an integer >= 0, got {seed}")


def run_stage(command: str, ray_address: str | None, source: Source, target: Target,
              progress: bool, **options: object) -> None:
    """Run a command's job (``ctxkit.jobs.run_<command>``) and print its report, or with
    ``--ray ADDRESS`` run the same stage with the same options on Ray Data."""
    if ray_address is None:
        import ctxkit.jobs as jobs

        run_job(getattr(jobs, f"run_{command}"), source, target, progress, **options)
        return
    from ctxkit.distributed import RayMissingError, run_command

    if not ray_address.strip():
        raise OptionError("--ray", "--ray needs an address: local, auto or ray://HOST:10001")
    try:
        rows = run_command(command, ray_address, source.path, target.output,
                           field=source.field, id_field=source.id_field,
                           template=source.template, skip_bad=source.skip_bad,
                           report_path=target.report, **options)
    except InputError:
        raise
    except (ValueError, RayMissingError) as exc:
        raise InputError(str(exc)) from None
    print_table(f"ctxkit {command} on Ray ({ray_address})", rows)


def run_job(job: Callable[..., JobReport], source: Source, target: Target, progress: bool,
            **options: object) -> None:
    """Run ``job`` (a ``ctxkit.jobs.run_*``) with progress bars (or none at all: with
    ``--no-progress`` transformers' own bars are off too) and print its report."""
    with quiet_transformers(not progress):
        report = job(source, target, progress=progress_bar(progress), **options)
    render(report)


def quiet_transformers(quiet: bool):
    """A context in which transformers draws no progress bars ("Loading weights") when
    ``quiet``; their previous state comes back on exit."""
    import contextlib

    if not quiet:
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def scope():
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:  # pragma: no cover - transformers is a dependency
            yield
            return
        was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            yield
        finally:
            if was:
                hf_logging.enable_progress_bar()

    return scope()


@app.callback()
def _root(debug: Annotated[bool, typer.Option(
        "--debug", help="Show the traceback of an internal error (also CTXKIT_DEBUG=1).")
          ] = False) -> None:
    """Make every token of a context window count: dedup, compress, score, pack, embed."""
    state["debug"] = state["debug"] or debug


@app.command("tokenizers")
def tokenizers_cmd() -> None:
    """List the tokenizer names --tokenizer accepts here (all work offline), then how to get
    the others."""
    from ctxkit.io.tokenizers import available_tokenizers, unavailable_tokenizers

    for name in available_tokenizers():
        out.print(name, markup=False, highlight=False)
    missing = unavailable_tokenizers()
    if missing:
        console.print("\nnot available offline here (ctxkit never downloads):", markup=False)
        for name, how in missing.items():
            console.print(f"  {name}: {how}", markup=False, highlight=False)
