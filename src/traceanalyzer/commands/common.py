"""What the command modules share: the CLI vocabulary and helpers.

* the shared options, one name / short form / metavar per idea (stable names): ``traces_arg``,
  ``trace_arg``, ``ConfigOpt`` / ``config_opt`` (``-c/--config``), ``OutputOpt`` / ``output_opt``
  (``-o/--output``), ``format_opt`` (``-f/--format``; with :data:`DocumentFormat`, :data:`TableFormat` or
  :data:`FrameFormat`, choices of the one :class:`~traceanalyzer.render.formats.Format`),
  ``StepRangeOpt``, ``WholeTraceOpt`` (with :func:`step_name`), ``CacheOpt``, ``WorkersOpt``,
  ``QuietOpt``, ``EngineOpt``, ``AddressOpt``, ``CommKernelOpt``, ``StoreOpt``, ``JobOpt``,
  ``trace_opt``, ``AllRowsOpt`` (``--all``); :func:`choices` for an enumerated value; every ``-o``
  help begins with :data:`OUTPUT_HELP`, every ``-f`` help with :data:`FORMAT_HELP`;
* validators for values a type cannot check (a bad value is a usage error, exit 2):
  :func:`positive_number`, :func:`finite_number`, :func:`non_negative_number`, :func:`fraction`,
  :func:`regex`, :func:`parsed_by`;
* :class:`Command`, :class:`Group`, :func:`param_kind`: from :mod:`traceanalyzer.commands.parsing`
  (the command line's parsing, the format rule, flags for Python names);
* :func:`table_command`: the table commands (kernels, ops, launches, annotations) as declarations
  of their own options, their verb and their renderer; warnings on stderr;
* :data:`SHARED_OPTIONS`: the options many commands take, declared once (:func:`shared_options`
  gives them to a command that names them); :func:`checked_outputs`: a command's outputs guard.
"""

from __future__ import annotations

import functools
import inspect
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from traceanalyzer.render import formats
from traceanalyzer.outputs import Outputs, may_be_terminal

if TYPE_CHECKING:
    from rich.console import Console

#: names this module gives the commands, made on first use: rich (about 20 ms to import) loads
#: only for a command that prints with it, never for JSON out with nothing to say on stderr
_LAZY = {
    "NoTrailingSpaces": "traceanalyzer.render.console", "out_console": "traceanalyzer.render.console",
    "terminal_width": "traceanalyzer.render.console",
    # the command line's parsing (they import this module's options)
    "Command": "traceanalyzer.commands.parsing", "Group": "traceanalyzer.commands.parsing",
    "param_kind": "traceanalyzer.commands.parsing",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


@functools.lru_cache(maxsize=1)
def stderr_console() -> Console:
    """The console of stderr: progress, and warnings on a terminal (:func:`stderr_line`). ``markup=False``: user text
    (kernel, category, file names) is printed as it is."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False)


class Engine(str, Enum):
    local = "local"
    ray = "ray"


#: ``-f`` of a command that prints a document of sections (tables): the terminal tables, Markdown
#: or the JSON document (each a :class:`~traceanalyzer.render.formats.Format`, as every ``-f``)
DocumentFormat = formats.subset("table", "json", "markdown")
#: ``-f`` of a command that prints one table: the terminal table, or the rows for machines
TableFormat = formats.subset("table", "json", "csv", "parquet")
#: ``-f`` of a command that prints tables of a verb's frames, without Parquet
FrameFormat = formats.subset("table", "json", "csv")


def choices(name: str, values) -> type[Enum]:
    """An Enum of string ``values`` for an option (``--help`` lists them; a bad one is exit 2)."""
    return Enum(name, {v: v for v in values}, type=str)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# The shared vocabulary: one name, one short form, one metavar per idea, for every command.
# Commands use the aliases below (or the ``*_opt`` factories for a command-specific help text);
# these names are stable.
# ---------------------------------------------------------------------------------------------

TRACES_HELP = "Trace file(s) or a directory of rank traces (.json, .json.gz, nsys .sqlite/.nsys-rep export)."


def traces_arg(help: str = TRACES_HELP, required: bool = True):
    """Positional trace files / directories (one or more; any number without ``required``).
    ``readable=False``: click's own check would make an unreadable file a usage error (exit 2);
    the loader says ``permission denied`` (exit 3, docs/errors.md)."""
    return typer.Argument(metavar="TRACE..." if required else "[TRACE]...", help=help, show_default=False, readable=False)


def trace_arg(help: str = "Trace file or directory of rank traces.", metavar: str = "TRACE"):
    return typer.Argument(metavar=metavar, help=help, show_default=False, readable=False)


def config_opt(help: str = "Run configuration (TOML)."):
    return typer.Option("--config", "-c", metavar="CONFIG", help=help, show_default=False)


#: how every command's ``-o/--output`` begins its help (a command adds what is its own after it)
OUTPUT_HELP = "Write to FILE instead of stdout (never over an input; whole or not at all)."
#: how every command's ``-f/--format`` begins its help
FORMAT_HELP = "Output format."


def output_opt(more: str = "", help: str | None = None):
    """``-o/--output FILE``: :data:`OUTPUT_HELP` and ``more``; ``help`` replaces both (a command
    whose output is never stdout: annotate)."""
    return typer.Option("--output", "-o", metavar="FILE", help=help or f"{OUTPUT_HELP} {more}".strip(), show_default=False)


def format_opt(more: str = ""):
    """``-f/--format``: :data:`FORMAT_HELP` and ``more`` (what each format holds)."""
    return typer.Option("--format", "-f", help=f"{FORMAT_HELP} {more}".strip())


def step_range_opt(help: str = "Name of the range that marks a training step."):
    return typer.Option("--step-range", metavar="NAME", help=help)


def store_opt(help: str = "Store directory written by `traceanalyzer batch`."):
    return typer.Option("--store", metavar="DIR", help=help, show_default=False)


def job_opt(help: str = "Only this job."):
    return typer.Option("--job", metavar="JOB", help=help, show_default=False)


def trace_opt(help: str = "Trace file(s) or directory of rank traces; repeatable."):
    return typer.Option("--trace", "-t", metavar="TRACE", help=help, show_default=False)


ConfigOpt = Annotated[Optional[Path], config_opt()]
OutputOpt = Annotated[Optional[Path], output_opt()]
StepRangeOpt = Annotated[str, step_range_opt()]
WholeTraceOpt = Annotated[bool, typer.Option("--whole-trace", help="Ignore step markers: analyse each rank's whole GPU span as one step.")]
CacheOpt = Annotated[
    bool,
    typer.Option(
        "--cache/--no-cache",
        help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE (default: the user cache directory, "
        "~/.cache/traceanalyzer on Linux) and reuse them for files with the same bytes.",
    ),
]
#: options every command that loads traces takes
WorkersOpt = Annotated[
    Optional[int],
    typer.Option("--workers", min=1, metavar="N", help="Rank files analysed in parallel (processes; default: all cores; 1: in this process)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (warnings and errors still go there).")]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="local: process pool on this machine; ray: one Ray task per rank file.")]
AddressOpt = Annotated[Optional[str], typer.Option("--address", metavar="ADDRESS", help="Ray cluster address (ray://host:10001 or host:6379); default: a local Ray.")]
#: every command whose table can hold rows that are all zero (a term that did not occur) hides them
AllRowsOpt = Annotated[bool, typer.Option("--all", help="Also the rows that are zero (hidden from the table and Markdown by default; "
                                          "JSON always has every row).")]
StoreOpt = Annotated[Path, store_opt()]
JobOpt = Annotated[Optional[str], job_opt()]


def _version(value: bool) -> None:
    if value:
        from traceanalyzer._version import __version__
        from traceanalyzer.api.commandline import decoder_name

        typer.echo(f"traceanalyzer {__version__} (Kineto decoder: {decoder_name()})")
        raise typer.Exit()


def no_color(value: bool = True) -> None:
    """Plain output: no colour on stderr or stdout (as the ``NO_COLOR`` environment variable)."""
    if value:
        import os

        os.environ["NO_COLOR"] = "1"  # consoles made from now on (out_console, stderr_console) read it
        if stderr_console.cache_info().currsize:
            stderr_console().no_color = True


def _no_color(value: bool) -> None:
    no_color(value)


VersionOpt = Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True, help="Show the version and exit.")]
NoColorOpt = Annotated[bool, typer.Option("--no-color", callback=_no_color, is_eager=True, help="No colour in the output (also: the NO_COLOR environment variable).")]

def step_name(step_range: str, whole_trace: bool) -> str | None:
    """The step marker to analyse with: none with ``--whole-trace``."""
    return None if whole_trace else step_range


# --- validators for values the option type alone cannot check: a bad one is a usage error (exit 2)

def positive_number(ctx, param, value):
    """A finite number > 0 (NaN and infinity refused), or None."""
    import math

    if value is None:
        return value
    for v in value if isinstance(value, (list, tuple)) else [value]:
        if not (v > 0 and math.isfinite(v)):
            raise typer.BadParameter(f"{v} is not a finite positive number")
    return value


def finite_number(ctx, param, value):
    """Any finite number (NaN and infinity refused), or None."""
    import math

    if value is not None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if not math.isfinite(v):
                raise typer.BadParameter(f"{v} is not a finite number")
    return value


def non_negative_number(ctx, param, value):
    """A finite number >= 0, or None."""
    import math

    if value is not None and not (value >= 0 and math.isfinite(value)):
        raise typer.BadParameter(f"{value} is not a finite number >= 0")
    return value


def share(ctx, param, value):
    """A number in [0, 1] (NaN refused), or None."""
    if value is not None and not (0 <= value <= 1):
        raise typer.BadParameter(f"{value} is not a share between 0 and 1")
    return value


def fraction(ctx, param, value):
    """A number in (0, 1], or None."""
    if value is not None and not (0 < value <= 1):
        raise typer.BadParameter(f"{value} is not in (0, 1]")
    return value


def parsed_by(parse):
    """A callback that checks a text value with ``parse`` (which raises a TraceAnalyzerError on a
    bad value) and keeps the text: a bad value is a usage error naming the option."""

    def callback(ctx, param, value):
        from traceanalyzer.errors import TraceAnalyzerError

        if value is None:
            return value
        for v in value if isinstance(value, (list, tuple)) else [value]:
            try:
                parse(v)
            except (TraceAnalyzerError, ValueError) as exc:
                from traceanalyzer.commands.flags import as_flags

                raise typer.BadParameter(as_flags(getattr(exc, "message", None) or str(exc))) from None
        return value

    return callback


def regex(ctx, param, value):
    """A valid Python regular expression, or None."""
    import re

    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise typer.BadParameter(f"{value!r} is not a valid regular expression: {exc}") from None
    return value


def require_config(config, megatron_args) -> None:
    """The run configuration is required (``-c`` and/or ``--megatron-args``): without it, a
    usage error (exit 2) like any missing option, before any work."""
    if config is None and megatron_args is None:
        usage_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
        raise usage_error("Missing option '-c' / '--config' (a run configuration, TOML; or --megatron-args FILE)")


def iso_date(text: str):
    import datetime as dt

    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD)") from None


#: the option every command that classifies kernels takes
CommKernelOpt = Annotated[
    Optional[list[str]],
    typer.Option("--comm-kernel", metavar="REGEX", help="Regex (case-insensitive) of kernel names that are communication, besides the known "
                 "libraries (NCCL/RCCL, DeepEP, NVSHMEM, userbuffers, custom all-reduce, MSCCL++). Repeatable; "
                 "also [trace] comm_kernels in the run configuration."),
]


def comm_patterns(cli: list[str] | None, config: Path | None = None, megatron_args: Path | None = None) -> list[str]:
    """The communication-kernel regexes of a command: ``--comm-kernel`` and the run
    configuration's ``[trace] comm_kernels``, each checked (exit 7 naming a bad one)."""
    from traceanalyzer.api.commandline import comm_patterns as patterns

    return patterns(cli, config, megatron_args)


def flagged(doc: dict) -> dict:
    """A document the command line writes, its ``warnings`` and ``notes`` naming the command
    line's flags where the layers below name Python arguments (:func:`~traceanalyzer.commands.flags.as_flags`)."""
    from traceanalyzer.commands.flags import as_flags

    return {**doc, **{key: [as_flags(w) if isinstance(w, str) else w for w in doc[key]]
                      for key in ("warnings", "notes") if isinstance(doc.get(key), list)}}


#: what rich's ``Text`` leaves out of a line: the control characters that move the cursor
_CURSOR_CONTROLS = str.maketrans("", "", "\a\b\v\f\r")


def stderr_line(text: str, label: str = "") -> None:
    """One line on stderr, printed as it is (no markup, no emoji codes), ``label`` (``warning:``)
    in yellow on a terminal. Where stderr cannot be one (a file, a pipe: rich would print plain
    text there) it is written without importing rich (0.015-0.08 s)."""
    if may_be_terminal():
        from rich.text import Text

        line = Text.assemble((label, "yellow"), " ", text) if label else Text(text)
        stderr_console().print(line, soft_wrap=True)
        return
    line = f"{label} {text}" if label else text
    sys.stderr.write(line.translate(_CURSOR_CONTROLS).expandtabs(8) + "\n")
    sys.stderr.flush()


def print_warnings(warnings: list[str], *, shows_transfer: bool = True) -> None:
    """Each warning on a line of stderr; a view that does not show collectives' wait/transfer split
    (``shows_transfer=False``: breakdown without --detail, kernels, launches...) leaves out the
    warnings about how it was estimated (the JSON of a view that has the split keeps them)."""
    from traceanalyzer.api.commandoptions import TRANSFER_WARNING
    from traceanalyzer.commands.flags import as_flags

    for w in warnings:
        if shows_transfer or not w.startswith(TRANSFER_WARNING):
            stderr_line(as_flags(w), "warning:")


class RankView(str, Enum):
    auto = "auto"
    all = "all"
    summary = "summary"


#: how commands that show one row per rank show many ranks (breakdown, report)
RanksOpt = Annotated[
    RankView,
    typer.Option("--ranks", help="auto: every rank up to 16 ranks, their distribution (min / p50 / max, slowest ranks) above; "
                 "all: every rank; summary: the distribution whatever the count."),
]


StrictOpt = Annotated[bool, typer.Option(
    "--strict", help="Exit 6 (after printing the result) when a trace-integrity check fails: graphs, profiler dilation, "
                     "steps without GPU work, stream order, dropped records, rank clocks, host events.")]


def strict_check(checks: list[dict] | None) -> None:
    """IntegrityFailed (exit 6) naming the failed checks of ``checks``, if any (``--strict``)."""
    from traceanalyzer.errors import IntegrityFailed

    bad = [c for c in checks or [] if c["ok"] is False]
    if bad:
        raise IntegrityFailed(f"--strict: {len(bad)} trace-integrity check{'s' if len(bad) != 1 else ''} failed: "
                              + "; ".join(f"{c['check']} ({c['detail']})" for c in bad))


# ---------------------------------------------------------------------------------------------
# The options many commands share, declared once: a command names them in its signature, without
# an annotation (:func:`shared_options`), or in its list of parameters (:func:`table_command`).

#: the shared options: name -> (annotation, default)
SHARED_OPTIONS: dict[str, tuple] = {
    "paths": (Annotated[list[Path], traces_arg()], inspect.Parameter.empty),
    "output": (OutputOpt, None),
    "step_range": (StepRangeOpt, "ProfilerStep"),
    "whole_trace": (WholeTraceOpt, False),
    "comm_kernel": (CommKernelOpt, None),
    "config": (Annotated[Optional[Path], config_opt("Run configuration (TOML): its [trace] section (comm_kernels) is applied.")], None),
    "cache": (CacheOpt, False),
    "workers": (WorkersOpt, None),
    "engine": (EngineOpt, Engine.local),
    "address": (AddressOpt, None),
    "quiet": (QuietOpt, False),
    "ranks": (RanksOpt, RankView.auto),
    "strict": (StrictOpt, False),
    "all_rows": (AllRowsOpt, False),
}


def shared_options(command):
    """A command whose parameters without an annotation are shared options (names of
    :data:`SHARED_OPTIONS`): each is given its declaration and default, in the place the command
    lists it (so ``--help`` lists the options in the command's order)."""
    signature = inspect.signature(command, eval_str=True)
    params = []
    for p in signature.parameters.values():
        if p.annotation is inspect.Parameter.empty:
            annotation, default = SHARED_OPTIONS[p.name]  # a KeyError here is a typo in a command's signature
            p = p.replace(annotation=annotation, default=default)
        params.append(p)
    command.__signature__ = signature.replace(parameters=params)
    command.__annotations__ = {**{p.name: p.annotation for p in params}, "return": signature.return_annotation}
    return command


def checked_outputs(paths, output: Path | None, *more: Path | None) -> Outputs:
    """The guard of a command's outputs (never over an input: ``paths`` and ``more``), with
    ``output`` checked against them before any work."""
    outputs = Outputs([*paths, *more])
    if output is not None:
        outputs.check(output)
    return outputs


# ---------------------------------------------------------------------------------------------
# The table commands (kernels, ops, launches, annotations): each prints the frames of one view
# of the trace files; a command is a declaration of its own options, its verb and its renderer.

def table_command(name: str, doc: str, params: list, view, render, *, check=None, width: int = 160, file_width: int = 200):
    """A table command: its parameters in the order of its help (a name of :data:`SHARED_OPTIONS`,
    or ``(name, annotation, default)`` for one of its own), and what it runs: ``check(options)``
    (the values' checks, before any file is looked at), ``view(options) -> (result, analysis)``
    (one verb of :mod:`traceanalyzer.api.commandline`), ``render(result, analysis, format, options)``
    (what :func:`traceanalyzer.render.formats.write` writes). ``options``: the parsed values by
    name, with ``comm_kernels`` (``--comm-kernel`` and the configuration's) and ``steps`` (the step
    marker: none with ``--whole-trace``). The warnings of the analysis go to stderr after it."""
    signature = []
    for p in params:
        pname, annotation, default = (p, *SHARED_OPTIONS[p]) if isinstance(p, str) else p
        signature.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation))

    def command(**options) -> None:
        if check is not None:
            check(options)
        options["comm_kernels"] = comm_patterns(options["comm_kernel"], options.get("config"))
        options["steps"] = step_name(options["step_range"], options["whole_trace"])
        outputs = checked_outputs(options["paths"], options["output"], options.get("config"))
        result, analysis = view(options)
        fmt = formats.Format(options["format"])
        formats.write(render(result, analysis, fmt, options), options["output"], outputs, width=width, file_width=file_width)
        print_warnings(analysis.warnings, shows_transfer=False)

    command.__name__ = command.__qualname__ = name.replace("-", "_")
    command.__doc__ = doc
    command.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in signature}
    return command
