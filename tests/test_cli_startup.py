"""What a command loads at start-up, and the option values it converts without pydantic.

* ``breakdown`` of a Kineto trace (JSON out) loads neither pydantic (typer's value conversion,
  replaced by :mod:`traceanalyzer.commands.coercion`), nor the run-configuration model, nor the
  process pool, nor the Nsight Systems parser: none of them is needed for one small trace; nor rich, when nothing is printed
  on stderr (no progress, no warning);
* every parameter of every command converts every value as typer's own conversion does: the
  same value of the same type, or the same usage error (typer builds its pydantic adapter here,
  in the test, to compare).
"""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from conftest import DEMO, ROOT, TRACES, shared_or_skip
from traceanalyzer.commands import coercion

#: modules a ``breakdown -f json`` of one small Kineto file does not need
NOT_LOADED = ("pydantic", "typer._adapters", "traceanalyzer.model", "traceanalyzer.reconciliation.gemm",
              "concurrent.futures.process", "multiprocessing.connection", "traceanalyzer.parsers.nsys", "sqlite3")

PROBE = """
import atexit, runpy, sys
sys.argv = ["traceanalyzer", "breakdown", sys.argv[1], "-f", "json", "-q"]
atexit.register(lambda: print("\\n#" + " ".join(sorted(sys.modules)), flush=True))  # the CLI's exit runs it
runpy.run_module("traceanalyzer", run_name="__main__")
"""


def _loaded(trace: Path) -> set[str]:
    r = subprocess.run([sys.executable, "-c", PROBE, str(trace)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.rsplit("\n#", 1)[1].split())
    assert "polars" in loaded and "typer" in loaded  # the probe saw the run
    return loaded


def _among(loaded: set[str], names) -> list[str]:
    return sorted(m for m in loaded for name in names if m == name or m.startswith(name + "."))


def test_breakdown_json_loads_only_what_it_uses():
    assert _among(_loaded(DEMO), NOT_LOADED) == []


def _typer_loads() -> set[str]:
    """The modules ``import typer`` loads by itself (typer before 0.29 imports rich for its help)."""
    r = subprocess.run([sys.executable, "-c", "import sys, typer; print(' '.join(sorted(sys.modules)))"],
                       capture_output=True, text=True, cwd=ROOT, check=True)
    return set(r.stdout.split())


@pytest.mark.parametrize("trace", shared_or_skip([TRACES / "h200" / "base" / "rank0.pt.trace.json.gz"], "the H200 traces"))
def test_breakdown_json_with_nothing_to_say_on_stderr_loads_no_rich(trace):
    """JSON out, no progress (a small file) and no warning: rich (tables, consoles) is not loaded
    beyond what typer itself loads (nothing from typer 0.29 on)."""
    assert _among(_loaded(trace) - _typer_loads(), (*NOT_LOADED, "rich")) == []


# ---------------------------------------------------------------------------------------------
# the conversion, against typer's own

#: typer before 0.29 converts with click's types: no pydantic to avoid, and :func:`coercion.install`
#: must leave every parameter as typer made it
OLDER_TYPER = coercion.build_runtime_param is None


def _nothing_installed() -> None:
    from traceanalyzer.cli import app

    group = typer.main.get_command(app)
    params = [p for cmd in [group, *group.commands.values()] for p in cmd.params]
    before = [dict(vars(p)) for p in params]
    coercion.install(params)
    assert params and [dict(vars(p)) for p in params] == before

SAMPLES_NUMBER = ["0", "1", "42", "-3", "007", "-0", "1e3", "1_000", " 5", "5 ", "abc", "", "3.0", "0.25", "-1.5", ".5", "5.",
                  "inf", "nan", "-inf", "123456789012345678901234", "0.1000000000000000055511151231257827", 3, 2.5, 0, -1,
                  True, float("nan"), float("inf")]
SAMPLES_TEXT = ["x", "", "héllo", "-", 5, b"bytes", True]
SAMPLES_BOOL = [True, False, "true", "1", "", "no"]


def _samples(p, tmp_path: Path) -> list:
    kind, choices = _kind(p)
    out: list = [p.default]
    if kind == "choice":
        enum_type = p.type_descriptor.annotation
        out += [*choices, *(c.upper() for c in choices), "nope", "", 3]
        if isinstance(enum_type, type) and issubclass(enum_type, enum.Enum):
            out += list(enum_type)
    elif kind in ("integer", "float"):
        out += SAMPLES_NUMBER
    elif kind == "path":
        (tmp_path / "f.txt").write_text("x")
        out += ["a/b", "", "-", "a/b/", str(tmp_path / "f.txt"), str(tmp_path), str(tmp_path / "missing"), Path("x"),
                tmp_path / "f.txt", 5, "bad\0name"]
    elif kind == "bool":
        out += SAMPLES_BOOL
    else:
        out += SAMPLES_TEXT
    if p.multiple or p.nargs == -1:
        out = [*out, *([v] for v in out[1:4]), tuple(out[1:3]), "single"]
    return out


def _kind(p):
    from traceanalyzer.commands.common import param_kind

    return param_kind(p)


def _outcome(fn):
    try:
        v = fn()
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return ("error", type(exc).__name__, str(getattr(exc, "format_message", lambda: exc)()))
    return ("value", _typed(v))


def _typed(v):
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_typed(x) for x in v])
    if isinstance(v, float) and v != v:
        return ("float", "nan")
    return (type(v).__name__, v)


def _params():
    from traceanalyzer.cli import app

    group = typer.main.get_command(app)
    ctx = typer._click.Context(group, info_name="traceanalyzer") if hasattr(typer, "_click") else None
    seen = []
    for cmd in [group, *group.commands.values()]:
        sub = typer._click.Context(cmd, info_name=cmd.name, parent=ctx) if ctx is not None else None
        for p in cmd.get_params(sub) if sub is not None else cmd.params:
            if hasattr(p, "type_descriptor"):
                seen.append(pytest.param(cmd, p, sub, id=f"{cmd.name}-{p.name}"))
    return seen


@pytest.mark.parametrize("cmd,param,ctx", _params() or [pytest.param(None, None, None, id="older-typer")])
def test_each_value_converts_as_typer_converts_it(cmd, param, ctx, tmp_path):
    if OLDER_TYPER:
        _nothing_installed()
        return
    from typer._coercion import build_runtime_param

    ours, theirs = coercion.Coercion(param), build_runtime_param(param.type_descriptor)
    for value in _samples(param, tmp_path):
        want = _outcome(lambda: theirs.coerce(value, param=param, ctx=ctx))
        got = _outcome(lambda: ours.coerce(value, param=param, ctx=ctx))
        assert got == want, (cmd.name, param.name, value)


def test_simple_spellings_are_converted_here_without_typers_adapter(monkeypatch):
    """The common values never reach typer's conversion (which would load pydantic)."""
    if OLDER_TYPER:
        _nothing_installed()
        return
    from traceanalyzer.cli import app
    from traceanalyzer.commands.common import TableFormat

    def refuse(_descriptor):
        raise AssertionError("typer's conversion was built")

    monkeypatch.setattr(coercion, "build_runtime_param", refuse)
    cmd = typer.main.get_command(app).commands["breakdown"]
    ctx = typer._click.Context(cmd, info_name="breakdown")
    by_name = {p.name: p for p in cmd.get_params(ctx)}
    for name, value, want in [("paths", ("a.json", "b"), [Path("a.json"), Path("b")]), ("format", "json", TableFormat.json),
                              ("bus_bw", "50", 50.0), ("bus_bw", "12.5", 12.5), ("workers", "4", 4), ("step_range", "Step", "Step"),
                              ("output", None, None), ("comm_kernel", None, ()), ("help", None, None), ("quiet", True, True)]:
        got = coercion.Coercion(by_name[name]).coerce(value, param=by_name[name], ctx=ctx)
        assert got == want and type(got) is type(want), (name, value, got)


PROBE_STDERR = PROBE.replace('"-q"]', '"-q"]\nsys.argv.remove("-q")')


@pytest.mark.parametrize("trace", shared_or_skip([TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"],
                                                 "the HTA traces"))
def test_warnings_and_progress_on_a_non_terminal_load_no_rich(trace):
    """54 MB of JSON (past the size that shows progress) with a warning to print, stderr a pipe:
    no bar can show and rich would print the warning as plain text, so rich is not loaded; the
    warning is the one line rich printed (checked against rich itself below)."""
    r = subprocess.run([sys.executable, "-c", PROBE_STDERR, str(trace)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.rsplit("\n#", 1)[1].split())
    assert _among(loaded - _typer_loads(), ("rich",)) == []
    assert r.stderr == ("warning: collective wait/transfer for 2020 of 2020 kernels is unknown: the trace gives no byte count "
                        "and not all ranks of its group are loaded\n")


@pytest.mark.parametrize("text", ["plain", "tab\there and\tthere", "carriage\rreturn, bell\a, form\ffeed",
                                  ":smile: [bold]not markup[/bold] :warning:", "ünïcödé — ok", "two\nlines\tx"])
def test_a_stderr_line_without_rich_is_what_rich_printed(text, capsys):
    """The plain path of ``stderr_line`` (stderr not a terminal) writes what rich's console wrote
    there: control characters removed, tabs expanded, no markup or emoji codes read."""
    import io

    from rich.console import Console
    from rich.text import Text

    from traceanalyzer.commands.common import stderr_line

    buf = io.StringIO()
    Console(file=buf, highlight=False, markup=False).print(Text.assemble(("warning:", "yellow"), " ", text), soft_wrap=True)
    stderr_line(text, "warning:")
    assert capsys.readouterr().err == buf.getvalue()


PROBE_ANY = """
import atexit, runpy, sys
sys.argv = ["traceanalyzer", *sys.argv[1:]]
atexit.register(lambda: print("\\n#" + " ".join(sorted(sys.modules)), flush=True))  # the CLI's exit runs it
runpy.run_module("traceanalyzer", run_name="__main__")
"""


@pytest.mark.parametrize("args", [["kernels", "-f", "csv"], ["ops", "-f", "json"], ["critical-path", "-f", "json"],
                                  ["critical-path", "-f", "csv"], ["launches", "-f", "csv"], ["breakdown", "-f", "csv"]])
def test_json_and_csv_out_load_no_rich(args, tmp_path):
    """A view written as JSON or CSV to a file, stderr a pipe: its renderer builds no rich table, so
    rich is not loaded (beyond what typer itself loads)."""
    out = tmp_path / f"out.{args[-1]}"
    r = subprocess.run([sys.executable, "-c", PROBE_ANY, args[0], str(DEMO), *args[1:], "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 100
    loaded = set(r.stdout.rsplit("\n#", 1)[1].split())
    assert "polars" in loaded
    assert _among(loaded - _typer_loads(), ("rich",)) == []
