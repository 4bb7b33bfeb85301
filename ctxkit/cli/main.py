"""The entry point: runs the typer app and turns every outcome into one exit status.

Exit status: 0 success; 2 the run could not be done as asked (bad input, options or paths;
one ``error:`` line naming the record or option); 3 an internal error (a bug: one line, the
traceback with ``--debug`` or ``CTXKIT_DEBUG=1``); 130 interrupted (Ctrl-C); 143 terminated
(SIGTERM). Outputs are replaced only when a run succeeds, so none of these loses the input
or the previous output.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import traceback
from typing import Any

import typer

from ctxkit.cli.app import app, state
from ctxkit.errors import InputError, RecordError

__all__ = ["EXIT_INPUT", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "main"]

EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 3, 130, 143
try:  # recent typer vendors click; older ones re-export click's exceptions
    from typer.exceptions import TyperException as _UsageError
except ImportError:  # pragma: no cover
    from click import ClickException as _UsageError


class Terminated(BaseException):
    """SIGTERM, raised where the process is so that staged outputs are cleaned up."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _error(message: str) -> None:
    """One ``error:`` line on stderr, never wrapped."""
    prefix = "\x1b[31merror:\x1b[0m" if sys.stderr.isatty() else "error:"
    print(f"{prefix} {' '.join(message.split())}", file=sys.stderr)


def _command_params(argv: list[str]) -> set[str]:
    """Option names of the subcommand named in ``argv`` (for hints that name a flag)."""
    group = typer.main.get_command(app)
    name = next((a for a in argv if not a.startswith("-")), None)
    command = getattr(group, "commands", {}).get(name)
    return {opt for p in getattr(command, "params", []) for opt in getattr(p, "opts", [])}


def _input_error(exc: InputError, argv: list[str]) -> str:
    """The error line, with its hint only when the hint's flags are the command's own."""
    hint = exc.hint
    if hint is None and isinstance(exc, RecordError) and exc.index is not None:
        hint = "use --skip-bad to skip and list such records"  # one record, not the file
    if hint and set(re.findall(r"--[a-z][a-z-]*", hint)) <= _command_params(argv):
        return f"{exc} ({hint})"
    return str(exc)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ctxkit`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    state["debug"] = os.environ.get("CTXKIT_DEBUG", "") not in ("", "0")
    previous = None
    with contextlib.suppress(ValueError):  # only the main thread may set handlers
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app(args=argv, prog_name="ctxkit", standalone_mode=False)
        code = code if isinstance(code, int) else 0
        if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into this exit code
            _error("interrupted; no output was replaced")
        return code
    except InputError as exc:
        if state["debug"]:
            traceback.print_exc()
        _error(_input_error(exc, argv))
        return EXIT_INPUT
    except typer.Exit as exc:
        return exc.exit_code
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help (already shown) is the answer
            if exc.format_message().strip():
                exc.show()
            return getattr(exc, "exit_code", EXIT_INPUT)
        ctx = getattr(exc, "ctx", None)
        where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _error(exc.format_message() + where)
        return getattr(exc, "exit_code", EXIT_INPUT)
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted; no output was replaced")
        return EXIT_INTERRUPTED
    except Terminated:
        _error("terminated; no output was replaced")
        return EXIT_TERMINATED
    except MemoryError:
        _error("out of memory; try a smaller input, --chunk-size or --capacity")
        return EXIT_INPUT
    except OSError as exc:
        if state["debug"]:
            traceback.print_exc()
        name = f": {exc.filename}" if exc.filename else ""
        _error(f"{exc.strerror or exc}{name}")
        return EXIT_INPUT
    except Exception as exc:
        if state["debug"]:
            traceback.print_exc()
            _error(f"internal error: {type(exc).__name__}: {exc}")
        else:
            _error(f"internal error: {type(exc).__name__}: {exc} -- a bug in ctxkit; rerun "
                   "with --debug (or CTXKIT_DEBUG=1) for the traceback and report it")
        return EXIT_INTERNAL
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
