"""The ``traceanalyzer`` command line: a thin layer over the Python API.

Every failure is one line on stderr and an exit code from ``traceanalyzer.errors.EXIT_CODES``;
set ``TRACEANALYZER_DEBUG=1`` to see the Python traceback of an internal error.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from traceanalyzer import __version__
from traceanalyzer.commands import annotate, baseline, batch, breakdown, gate, plan, predict, reconcile, report, trend
from traceanalyzer.errors import EXIT_CODES, TraceAnalyzerError

_EPILOG = "Exit codes: " + "; ".join(f"{k} {v.split(':')[0]}" for k, v in EXIT_CODES.items()) + "."

app = typer.Typer(
    name="traceanalyzer",
    help="Where did my MFU go? Measured, explained breakdowns of training traces.",
    epilog=_EPILOG,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

for _module in (breakdown, predict, reconcile, report, annotate, batch, trend, gate, baseline, plan):
    _module.register(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"traceanalyzer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = None,
) -> None:
    """Where did my MFU go? Measured, explained breakdowns of training traces."""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app, map every error to one line and an exit code."""
    try:
        app(args=argv, prog_name="traceanalyzer", standalone_mode=False)
        return 0
    except TraceAnalyzerError as exc:
        print(f"traceanalyzer: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        print("traceanalyzer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        # usage errors (typer's, or click's in older typer): its own message, exit code 2
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        # anything else is a bug: one line, unless debugging
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        where = ""
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        print(
            f"traceanalyzer: internal error: {type(exc).__name__}: {exc}{where} "
            "(a bug: please report it with the input; TRACEANALYZER_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> None:
    sys.exit(main())
