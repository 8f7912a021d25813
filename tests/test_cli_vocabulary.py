"""One CLI vocabulary, checked on EVERY registered command (new commands are picked up
automatically from the typer app): ``-h``/``--help``/``-V``, choices listed in the help,
readable metavars, the shared option names, and exit 2 with one line for every bad value of
every enumerated or numeric option."""

from __future__ import annotations

import re

import pytest
import typer

from conftest import DEMO, PYTHONPATH, run_cli
from traceanalyzer import __version__
from traceanalyzer.cli import app, main
from traceanalyzer.commands.common import param_kind
from traceanalyzer.parsers import decoder

GROUP = typer.main.get_command(app)
COMMANDS = sorted(GROUP.commands)

#: typer's own renderings that must never reach a user: <str>, <list[Path]>, {paths}..., <int range>
BAD_METAVAR = re.compile(r"<(?:str|int|float|bool|path|text|file|list\[[^\]]*\]|(?:int|float) range)>|\{\w+(?:\.\.\.)?\}|\bTEXT\.\.\.|<[a-z]+>")

#: the shared vocabulary: a parameter with this name has exactly these option strings
VOCABULARY = {
    "config": {"-c", "--config"},
    "output": {"-o", "--output"},
    "format": {"-f", "--format"},
    "step_range": {"--step-range"},
    "whole_trace": {"--whole-trace"},
    "workers": {"--workers"},
    "quiet": {"-q", "--quiet"},
    "cache": {"--cache", "--no-cache"},
    "engine": {"--engine"},
    "address": {"--address"},
    "comm_kernel": {"--comm-kernel"},
    "store": {"--store"},
}

#: text-typed options holding a number, a date or a range: a value their parser refuses
TEXT_VALUED = {"--since": "yesterday", "--max-regression": "lots", "--tokens": "many", "--tflops": "fast",
               "--mfu": "2", "--params": "huge"}


def test_the_walk_sees_every_command():
    # the commands of this branch at least; commands added later are walked as well
    assert {"breakdown", "report", "annotate", "batch", "trend", "gate", "baseline", "plan", "predict", "reconcile",
            "compare"} <= set(COMMANDS)


def _run(argv, capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", COMMANDS)
def test_help_of_every_command(name, capsys):
    code, help_text, err = _run([name, "-h"], capsys)
    assert code == 0 and err == ""
    code, long_help, _ = _run([name, "--help"], capsys)
    assert code == 0 and long_help == help_text
    assert not BAD_METAVAR.search(help_text), BAD_METAVAR.search(help_text).group()
    assert "-V, --version" in help_text and "--no-color" in help_text and "-h, --help" in help_text
    cmd = GROUP.commands[name]
    for p in cmd.params:
        if p.param_type_name != "option" or p.hidden:
            continue
        kind, choices = param_kind(p)
        if kind == "choice":  # every choice listed in the help
            for c in choices:
                assert re.search(rf"[<\[|]{re.escape(c)}[|>\]]", help_text), (name, p.opts, c)
        elif not p.is_flag:  # a value: a readable metavar of its own
            assert p.metavar and re.fullmatch(r"[A-Z][A-Z0-9_/=.\-\[\]]*", p.metavar), (name, p.opts, p.metavar)
        if p.name in VOCABULARY:
            assert set(p.opts) | set(p.secondary_opts) == VOCABULARY[p.name], (name, p.name, p.opts)
    for p in cmd.params:
        if p.param_type_name == "argument":
            assert re.fullmatch(r"\[?[A-Z][A-Z0-9_]*\]?(\.\.\.)?", p.metavar), (name, p.metavar)
    code, out, _ = _run([name, "-V"], capsys)
    assert code == 0 and out == f"traceanalyzer {__version__} (Kineto decoder: {decoder.name()})\n"


def test_root_help_version_and_completion(capsys):
    code, out, _ = _run(["-h"], capsys)
    assert code == 0 and "--install-completion" in out and "--show-completion" in out and "-V, --version" in out
    assert all(name in out for name in COMMANDS)
    assert _run(["-V"], capsys)[1] == f"traceanalyzer {__version__} (Kineto decoder: {decoder.name()})\n"
    r = run_cli("--show-completion", "bash")
    assert r.returncode == 0 and "_traceanalyzer_completion" in r.stdout and "complete " in r.stdout


def _bad_values(p) -> list[str]:
    kind, _ = param_kind(p)
    if kind == "choice":
        return ["not-a-choice"]
    if kind == "integer":
        bad = ["abc", "1.5"]
        lo = getattr(p, "min", None)
        if lo is None and hasattr(p, "type") and hasattr(p.type, "min"):
            lo = p.type.min
        return bad + ([str(lo - 1)] if lo is not None else [])
    if kind == "float":  # every float option refuses NaN (common.finite_number, positive_number, ...)
        return ["abc", "nan"]
    for opt in p.opts:
        if opt in TEXT_VALUED:
            return [TEXT_VALUED[opt]]
    return []


#: out-of-range values of options whose range the type does not show
OUT_OF_RANGE = [("breakdown", "--bus-bw", "-1"), ("breakdown", "--bus-bw", "inf"), ("baseline", "--nvlink-gbps", "0"),
                ("baseline", "--net-gbps", "-5"), ("predict", "--kernel-efficiency", "1.5"), ("predict", "--kernel-efficiency", "0"),
                ("plan", "--pue", "0.9"), ("plan", "--gpu-power-w", "0"), ("plan", "--price-per-gpu-hour", "-1"),
                ("gate", "--max-regression", "-3%"), ("trend", "--since", "2026-02-30"), ("plan", "--mfu", "150%"),
                ("plan", "--tokens", "0"), ("report", "--rank", "-1"), ("report", "--top", "1001")]

CASES = [
    (name, p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0], bad)
    for name in COMMANDS
    for p in GROUP.commands[name].params
    if p.param_type_name == "option" and not p.is_flag
    for bad in _bad_values(p)
] + OUT_OF_RANGE


def test_the_bad_value_cases_cover_the_known_options():
    flat = {(n, o) for n, o, _ in CASES}
    for expected in [("trend", "--metric"), ("trend", "--since"), ("gate", "--max-regression"), ("breakdown", "--bus-bw"),
                     ("breakdown", "--format"), ("breakdown", "--engine"), ("reconcile", "--convention"), ("predict", "--hfu"),
                     ("plan", "--convention"), ("baseline", "--scope"), ("report", "--top"), ("breakdown", "--workers"),
                     ("predict", "--kernel-efficiency"), ("plan", "--pue"), ("plan", "--tokens")]:
        assert expected in flat, expected


@pytest.mark.parametrize("name, opt, bad", CASES, ids=[f"{n} {o} {b}" for n, o, b in CASES])
def test_a_bad_value_is_exit_2_in_one_line(name, opt, bad, capsys):
    code, out, err = _run([name, f"{opt}={bad}"], capsys)
    assert code == 2, (code, err)
    assert out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"traceanalyzer {name}: usage error: ") and opt in line, line


def test_usage_errors_are_one_line_exit_2(capsys):
    code, _, err = _run(["breakdown"], capsys)  # missing argument
    assert code == 2 and len(err.strip().splitlines()) == 1 and "TRACE" in err
    code, _, err = _run(["breakdown", str(DEMO), "--no-such-option"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--no-such-option" in err
    code, _, err = _run(["no-such-command"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no-such-command" in err


@pytest.mark.parametrize("how", ["env", "flag", "root-flag"])
def test_no_color(how, tmp_path):
    """Rich colours the ``warning:`` label yellow when forced to (FORCE_COLOR); NO_COLOR or
    --no-color removes every colour (styles such as bold may stay, as the NO_COLOR convention says)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    def run(args, extra_env):
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "FORCE_COLOR": "1", **extra_env}
        env.pop("NO_COLOR", None) if "NO_COLOR" not in extra_env else None
        return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], capture_output=True, text=True, env=env, cwd=ROOT)

    colour = re.compile(r"\x1b\[[0-9;]*(?:3[0-8]|9[0-7])(?:;[0-9;]*)?m")
    base = ["breakdown", str(DEMO), "-q", "--workers", "1"]
    if how == "env":
        r = run(base, {"NO_COLOR": "1"})
        coloured = run(base, {})  # the same run forced to colour: the check can fail
        assert colour.search(coloured.stderr) and "warning:" in coloured.stderr
    elif how == "flag":
        r = run([*base, "--no-color"], {})
    else:
        r = run(["--no-color", *base], {})
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and not colour.search(r.stderr) and not colour.search(r.stdout)
