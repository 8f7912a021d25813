"""What the command modules share: the CLI vocabulary and helpers.

* the shared options, one name / short form / metavar per idea (stable names): ``traces_arg``,
  ``trace_arg``, ``ConfigOpt`` / ``config_opt`` (``-c/--config``), ``OutputOpt`` / ``output_opt``
  (``-o/--output``), ``format_opt`` (``-f/--format``; with :class:`Format` or :class:`TableFormat`),
  ``StepRangeOpt``, ``WholeTraceOpt`` (with :func:`step_name`), ``CacheOpt``, ``WorkersOpt``,
  ``QuietOpt``, ``EngineOpt``, ``AddressOpt``, ``CommKernelOpt``, ``StoreOpt``, ``JobOpt``,
  ``trace_opt``, ``AllRowsOpt`` (``--all``); :func:`choices` for an enumerated value; every ``-o``
  help begins with :data:`OUTPUT_HELP`, every ``-f`` help with :data:`FORMAT_HELP`;
* validators for values a type cannot check (a bad value is a usage error, exit 2):
  :func:`positive_number`, :func:`finite_number`, :func:`non_negative_number`, :func:`fraction`,
  :func:`regex`, :func:`parsed_by`;
* :class:`Command`, the class of every command of the app (``-V``, ``--no-color``, readable
  metavars, values converted without pydantic: :mod:`traceanalyzer.commands.coercion`), set by
  ``cli.app`` for every command registered on it, and :class:`Group`, the app's own;
* analysing with progress (:func:`analyse_paths`), writing output (:func:`out_console`, from
  :mod:`traceanalyzer.render.console`), warnings.
"""

from __future__ import annotations

import functools
import re
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from traceanalyzer.commands import coercion
from traceanalyzer.outputs import Outputs

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

#: names this module gives the commands, made on first use: rich (about 20 ms to import) loads
#: only for a command that prints with it, never for JSON out with nothing to say on stderr
_LAZY = {
    "err_console": None,  # stderr_console()
    "NoTrailingSpaces": "traceanalyzer.render.console", "out_console": "traceanalyzer.render.console",
    "terminal_width": "traceanalyzer.render.console",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _LAZY[name] is None:
        return stderr_console()
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


@functools.lru_cache(maxsize=1)
def stderr_console() -> Console:
    """The console of stderr (``err_console``): progress, warnings. ``markup=False``: user text
    (kernel, category, file names) is printed as it is."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False)


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class Format(str, Enum):
    """Output of a command that prints a report-like document (sections of tables)."""

    table = "table"
    json = "json"


class TableFormat(str, Enum):
    """Output of a command that prints one table: the terminal table, or the rows for machines."""

    table = "table"
    json = "json"
    csv = "csv"
    parquet = "parquet"


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
        from traceanalyzer import decoder
        from traceanalyzer._version import __version__

        typer.echo(f"traceanalyzer {__version__} (Kineto decoder: {decoder.name()})")
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

#: metavar of an option whose command did not name one, by its kind (:func:`param_kind`)
_METAVARS = {"path": "PATH", "file": "FILE", "text": "TEXT", "integer": "INTEGER", "float": "NUMBER"}


def param_kind(p) -> tuple[str, tuple[str, ...]]:
    """(kind, choices) of a click parameter of the app, whichever typer built it: kind is one of
    choice, integer, float, path, file, text, bool (typer >= 0.20 describes the type with a
    ``type_descriptor``, older ones with a click ``ParamType``)."""
    import typing

    desc = getattr(p, "type_descriptor", None)
    if desc is None:
        t = p.type
        name = getattr(t, "name", "")
        if name == "choice":
            return "choice", tuple(map(str, t.choices))
        return {"integer range": "integer", "float range": "float", "filename": "file", "boolean": "bool"}.get(name, name), ()
    if desc.is_choice:
        return "choice", tuple(str(getattr(c, "value", c)) for c in desc.choices)
    ann = desc.annotation
    while typing.get_origin(ann) in (list, tuple, typing.Union) or str(typing.get_origin(ann)) == "types.UnionType":
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = args[0] if args else str
    if desc.is_file:
        return "file", ()
    if desc.is_path or ann is Path:
        return "path", ()
    return {int: "integer", float: "float", bool: "bool", str: "text"}.get(ann, "text"), ()


@functools.lru_cache(maxsize=1)
def _common_params() -> tuple:
    """``-V/--version`` and ``--no-color`` as click parameters of the running typer (built by
    typer itself, so they look like every other option of its version)."""
    probe = typer.Typer(add_completion=False)

    @probe.command("probe")
    def _probe(version: VersionOpt = None, no_color: NoColorOpt = False) -> None:  # pragma: no cover - never run
        pass

    @probe.command("other")
    def _other() -> None:  # pragma: no cover - a second command keeps the probe a group
        pass

    group = typer.main.get_command(probe)
    params = list(group.commands["probe"].params)
    for p in params:
        p.expose_value = False
    return tuple(params)


class Command(typer.core.TyperCommand):
    """Every command of the app: the common options (``-V/--version``, ``--no-color``) besides
    ``-h/--help``, and a readable metavar for any option or argument that did not name one
    (``PATH``, ``TEXT``, ``INTEGER``..., never typer's ``<list[Path]>`` or ``{paths}``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = {n for p in self.params for n in getattr(p, "opts", [])}
        self.params += [p for p in _common_params() if not names & set(p.opts)]
        for p in self.params:
            _no_readable_check(p)
            if p.param_type_name == "argument":
                _argument_metavar(p)
                continue
            if p.metavar is not None or getattr(p, "is_flag", False) or getattr(p, "count", False):
                continue
            kind, _ = param_kind(p)
            if kind != "choice":  # the choices are the metavar
                p.metavar = _METAVARS.get(kind, "VALUE")

    def parse_args(self, ctx, args):
        coercion.install(self.get_params(ctx))  # -h/--help included (made on first use)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        format_from_output(self, ctx)
        return super().invoke(ctx)


class Group(typer.core.TyperGroup):
    """The app itself: its options' values (typer's completion options, added after the group
    is made, and -h/--help included) converted as every command's (:mod:`.coercion`)."""

    def parse_args(self, ctx, args):
        coercion.install(self.get_params(ctx))  # -h/--help included (made on first use)
        return super().parse_args(ctx, args)


#: the formats a known extension of ``-o`` names (a name without an extension leaves the format
#: to ``-f``; another extension is refused, see :func:`format_from_output`)
OUTPUT_EXTENSIONS = {".md": "markdown", ".markdown": "markdown", ".json": "json", ".html": "html", ".htm": "html",
                     ".csv": "csv", ".parquet": "parquet", ".txt": "text", ".text": "text"}
#: the plain-text formats, by name: ``.txt`` selects whichever of them the command has
TEXT_FORMATS = ("table", "text")
#: extensions a command writes itself, outside its ``-f`` formats (``trend -o trend.png``: the plot)
OWN_EXTENSIONS = {"trend": {".png"}}
#: what looks like a file extension (``.png``, ``.xlsx``): a name ending otherwise (``run.2026-11-20``) has none
_EXTENSION = re.compile(r"^\.[A-Za-z][A-Za-z0-9]{0,7}$")


def format_from_output(command, ctx) -> None:
    """The one rule of every command with ``-o`` and ``-f``: a known extension of the output's
    name (:data:`OUTPUT_EXTENSIONS`) selects the format; ``-f`` naming another format is a usage
    error (exit 2) naming the file, and so is an extension the command cannot write."""
    output, fmt = ctx.params.get("output"), ctx.params.get("format")
    if output is None or fmt is None or "format" not in {p.name for p in command.params}:
        return
    suffix = Path(str(output)).suffix
    if not _EXTENSION.match(suffix):
        return
    param = next(p for p in command.params if p.name == "output")
    _, formats = param_kind(next(p for p in command.params if p.name == "format"))
    if suffix.lower() in OWN_EXTENSIONS.get(ctx.info_name, ()):
        given = str(getattr(fmt, "value", fmt))
        if given not in TEXT_FORMATS:
            raise typer.BadParameter(f"{output}: the name says a {suffix} plot, written with the table format, but -f {given} "
                                     "was given; drop -f, or give another name", ctx=ctx, param=param)
        return
    wanted = OUTPUT_EXTENSIONS.get(suffix.lower())
    if wanted == "text":  # .txt: the command's plain-text format, whatever its name
        wanted = next((f for f in formats if f in TEXT_FORMATS), "text")
    if wanted is None:  # .png, .xlsx, .gz...: never written as something else
        _check_not_an_input(ctx, output)
        raise typer.BadParameter(f"{output}: {ctx.info_name} cannot write {suffix} files (formats: {', '.join(formats)}); "
                                 "give a name with one of their extensions, or none", ctx=ctx, param=param)
    given = str(getattr(fmt, "value", fmt))
    source = ctx.get_parameter_source("format")
    explicit = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")
    if wanted not in formats or (explicit and given != wanted):
        _check_not_an_input(ctx, output)  # an output naming an input is exit 3 first, whatever its name
    if wanted not in formats:
        raise typer.BadParameter(f"{output}: {ctx.info_name} cannot write {suffix} files (formats: {', '.join(formats)}); "
                                 "give a name with another extension", ctx=ctx, param=param)
    if explicit and given != wanted:
        raise typer.BadParameter(f"{output}: the name says {wanted} ({suffix}) but -f {given} was given; "
                                 f"drop -f, or give -f {wanted}", ctx=ctx, param=param)
    if given != wanted:
        ctx.params["format"] = type(fmt)(wanted) if isinstance(fmt, Enum) else wanted


def _no_readable_check(p) -> None:
    """typer checks that a path is readable and calls an unreadable one a usage error (exit 2):
    a file that cannot be read is the loader's to report, naming it, with exit 3 (old typer keeps
    the check on a click ``Path`` type, newer typer on the parameter's ``type_descriptor``)."""
    t = getattr(p, "type", None)
    if hasattr(t, "readable"):
        t.readable = False
    info = getattr(getattr(p, "type_descriptor", None), "parameter_info", None)
    if hasattr(info, "readable"):
        info.readable = False


def _argument_metavar(p) -> None:
    """``TRACE...`` (one or more), ``[FILE]...`` (any number), ``TRACE`` (one): the same in the
    usage line and the help of every typer version (newer ones add ``{paths}`` / ``<list[Path]>``)."""
    base = (p.metavar or p.name or "ARG").upper().strip(".[]")
    shown = base + ("..." if p.nargs != 1 else "")
    if not p.required:
        shown = f"[{base}]" + ("..." if p.nargs != 1 else "")
    p.metavar = shown
    if hasattr(p, "_usage_display_name"):  # typer >= 0.20 builds these itself
        p._usage_display_name = lambda: shown
        p.display_type_rich = lambda ctx: None


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
                raise typer.BadParameter(getattr(exc, "message", None) or str(exc)) from None
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


def binary_output_check(format, output) -> None:
    """Parquet is binary: to a file (-o) or a pipe, never to a terminal."""
    if getattr(format, "value", format) == "parquet" and output is None and sys.stdout.isatty():
        raise typer.BadParameter("parquet is binary: give -o FILE (or pipe the output)", param_hint="'-f'")


def _check_not_an_input(ctx, output) -> None:
    """Refuse (exit 3) an output that is one of the command's inputs: every path given to it."""
    paths = {p.name for p in ctx.command.params if p.name != "output" and param_kind(p)[0] in ("path", "file")}
    inputs = []
    for name, value in ctx.params.items():  # str or Path, as the typer version converts them
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if name in paths and isinstance(v, (str, Path)):
                inputs.append(v)
    Outputs(inputs).check(output)


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


def analyse_paths(
    paths: list[Path],
    step_name: str | None = "ProfilerStep",
    *,
    recompute_pattern: str | None = None,
    bus_bw_gbps: float | None = None,
    cache: bool = False,
    keep: str = "compact",
    workers: int | None = None,
    engine: Engine | str = "local",
    address: str | None = None,
    quiet: bool = False,
    comm_kernels: list[str] | None = None,
    extras: tuple[str, ...] = (),
):
    """:func:`traceanalyzer.api.commandline.analyse_files` with its progress on stderr (a bar on a terminal, a
    line per rank file otherwise, nothing with ``quiet``)."""
    from traceanalyzer.api.commandline import analyse_files

    return analyse_files(paths, step_name, recompute_pattern=recompute_pattern, bus_bw_gbps=bus_bw_gbps, cache=cache, keep=keep,
                         workers=workers, engine=Engine(engine).value, address=address, quiet=quiet, comm_kernels=comm_kernels,
                         extras=extras, console=stderr_console)


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


def warning_line(text: str) -> Text:
    """``warning: <text>`` with the label coloured and the text printed as it is (no markup)."""
    from rich.text import Text

    return Text.assemble(("warning:", "yellow"), " ", text)


def print_warnings(warnings: list[str], *, shows_transfer: bool = True) -> None:
    """Each warning on a line of stderr; a view that does not show collectives' wait/transfer split
    (``shows_transfer=False``: breakdown without --detail, kernels, launches...) leaves out the
    warnings about how it was estimated (the JSON of a view that has the split keeps them)."""
    from traceanalyzer.api.commandline import TRANSFER_WARNING

    for w in warnings:
        if shows_transfer or not w.startswith(TRANSFER_WARNING):
            stderr_console().print(warning_line(w), soft_wrap=True)


def print_store_warnings(store) -> None:
    """The damaged files a read of a batch store skipped (names printed as they are, no markup)."""
    for w in store.warnings:
        stderr_console().print(warning_line(w), soft_wrap=True)


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
