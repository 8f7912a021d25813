"""How the command line parses: the class of every command and of the app, the one rule that
an output's name selects its format.

* :class:`Command`, the class of every command of the app (``-V``, ``--no-color``, readable
  metavars, values converted without pydantic: :mod:`traceanalyzer.commands.coercion`), set by
  ``cli.app`` for every command registered on it, and :class:`Group`, the app's own;
* :func:`format_from_output`: ``-o NAME.EXT`` and ``-f`` (the extensions and which formats are
  binary: :class:`traceanalyzer.render.formats.Format`);
* a value the input does not have (a rank, a step; the API's ``BadValue``): a usage error
  naming the flag (:func:`traceanalyzer.commands.flags.as_flags`).
"""

from __future__ import annotations

import functools
import re
import sys
from enum import Enum
from pathlib import Path

import typer

from traceanalyzer.commands import coercion
from traceanalyzer.commands.common import NoColorOpt, VersionOpt
from traceanalyzer.commands.flags import as_flags
from traceanalyzer.outputs import Outputs

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
        from traceanalyzer.errors import TraceAnalyzerError

        try:
            return super().invoke(ctx)
        except TraceAnalyzerError as exc:
            param = getattr(exc, "param", None)  # a value the input does not have: a usage error naming the flag
            if param is None:
                raise
            raise typer.BadParameter(as_flags(exc.message), ctx=ctx, param_hint=f"'{as_flags(f'`{param}`')}'") from None


class Group(typer.core.TyperGroup):
    """The app itself: its options' values (typer's completion options, added after the group
    is made, and -h/--help included) converted as every command's (:mod:`.coercion`)."""

    def parse_args(self, ctx, args):
        coercion.install(self.get_params(ctx))  # -h/--help included (made on first use)
        return super().parse_args(ctx, args)


#: extensions a command writes itself, outside its ``-f`` formats (``trend -o trend.png``: the plot)
OWN_EXTENSIONS = {"trend": {".png"}}
#: what looks like a file extension (``.png``, ``.xlsx``): a name ending otherwise (``run.2026-11-20``) has none
_EXTENSION = re.compile(r"^\.[A-Za-z][A-Za-z0-9]{0,7}$")


def format_from_output(command, ctx) -> None:
    """The one rule of every command with ``-o`` and ``-f``: a known extension of the output's
    name (:attr:`Format.extensions <traceanalyzer.render.formats.Format.extensions>`) selects the
    format; ``-f`` naming another format is a usage error (exit 2) naming the file, and so is an
    extension the command cannot write. A binary format (parquet) goes to a file or a pipe, never
    to a terminal."""
    from traceanalyzer.render.formats import Format

    output, fmt = ctx.params.get("output"), ctx.params.get("format")
    if fmt is None or "format" not in {p.name for p in command.params}:
        return
    if output is None:
        if Format(getattr(fmt, "value", fmt)).binary and sys.stdout.isatty():
            raise typer.BadParameter(f"{getattr(fmt, 'value', fmt)} is binary: give -o FILE (or pipe the output)", ctx=ctx,
                                     param_hint="'-f'")
        return
    suffix = Path(str(output)).suffix
    if not _EXTENSION.match(suffix):
        return
    param = next(p for p in command.params if p.name == "output")
    _, formats = param_kind(next(p for p in command.params if p.name == "format"))
    if suffix.lower() in OWN_EXTENSIONS.get(ctx.info_name, ()):
        given = str(getattr(fmt, "value", fmt))
        if not Format(given).plain:
            raise typer.BadParameter(f"{output}: the name says a {suffix} plot, written with the table format, but -f {given} "
                                     "was given; drop -f, or give another name", ctx=ctx, param=param)
        return
    named = Format.named_by(suffix, formats)
    if named is None:  # .png, .xlsx, .gz...: never written as something else
        _check_not_an_input(ctx, output)
        raise typer.BadParameter(f"{output}: {ctx.info_name} cannot write {suffix} files (formats: {', '.join(formats)}); "
                                 "give a name with one of their extensions, or none", ctx=ctx, param=param)
    wanted = named.value
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


def _check_not_an_input(ctx, output) -> None:
    """Refuse (exit 3) an output that is one of the command's inputs: every path given to it."""
    paths = {p.name for p in ctx.command.params if p.name != "output" and param_kind(p)[0] in ("path", "file")}
    inputs = []
    for name, value in ctx.params.items():  # str or Path, as the typer version converts them
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if name in paths and isinstance(v, (str, Path)):
                inputs.append(v)
    Outputs(inputs).check(output)
