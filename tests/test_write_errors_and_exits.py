"""Write errors and the exit codes of the remaining hostile cases, run as a user would
(subprocesses):

* standard output that cannot be written (``> /dev/full``, closed, read-only): one line, exit 3
  (never exit 1 "internal error");
* the name of ``-o`` picks the format (``report -o r.md`` is Markdown); ``-f`` against it, or an
  extension the command cannot write, is a usage error naming the file;
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import orjson
import polars as pl
import pytest
import typer

from conftest import DEMO, ROOT
from test_fresh_install import COMMANDS
from traceanalyzer.cli import app, main
from traceanalyzer.commands.common import OUTPUT_EXTENSIONS, param_kind

GROUP = typer.main.get_command(app)

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
CONFIG = ROOT / "docs" / "examples" / "megatron-readme-70b.toml"


def shell(script: str, *args) -> subprocess.CompletedProcess:
    """``python -m traceanalyzer ARGS`` with the redirections of ``script`` (``$@`` is the command)."""
    return subprocess.run(["bash", "-c", script, "sh", sys.executable, "-m", "traceanalyzer", *map(str, args)],
                          capture_output=True, text=True, env=ENV, cwd=ROOT)


def errors(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [ln for ln in stderr.splitlines() if not ln.startswith("warning:")]


@pytest.mark.parametrize("args", [
    ["breakdown", DEMO],  # a rich table
    ["breakdown", DEMO, "-f", "json"],
    ["kernels", DEMO, "-f", "csv"],
    ["predict", "-c", CONFIG],
    ["--version"],
], ids=["table", "json", "csv", "predict", "version"])
def test_a_full_stdout_is_exit_3_in_one_line(args):
    r = shell('"$@" > /dev/full', *args)
    assert r.returncode == 3, r.stderr
    assert errors(r.stderr) == ["traceanalyzer: error: cannot write the output to standard output: no space left on the device"]


def test_a_closed_or_read_only_stdout_is_exit_3_and_a_file_output_still_works(tmp_path):
    for redirect in (">&-", "1</dev/null"):
        r = shell(f'"$@" {redirect}', "predict", "-c", CONFIG)
        assert r.returncode == 3, (redirect, r.stderr)
        assert errors(r.stderr) == ["traceanalyzer: error: cannot write the output to standard output: it is closed or not open for writing"]
    out = tmp_path / "b.json"
    r = shell('"$@" >&-', "breakdown", DEMO, "-f", "json", "-o", out)
    assert r.returncode == 0 and errors(r.stderr) == [], r.stderr
    assert out.read_bytes().startswith(b"{")


def test_a_full_stderr_is_still_exit_3_never_1():
    """The warnings cannot be written (the line saying so cannot either): the exit status says it."""
    r = subprocess.run(["bash", "-c", '"$@" > /dev/null 2>/dev/full; echo "rc=$?"', "sh", sys.executable, "-m", "traceanalyzer",
                        "breakdown", str(DEMO), "-f", "json"], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.stdout == "rc=3\n", r


# ---------------------------------------------------------------------------------------------
# the name of -o picks the format


def test_the_name_of_the_report_picks_its_format(tmp_path):
    r = shell('"$@"', "report", DEMO, "-o", tmp_path / "r.md", "-q")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("## traceanalyzer report") and "<html" not in md.lower()
    r = shell('"$@"', "report", DEMO, "-o", tmp_path / "r.json", "-q")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert doc["schema"] == "traceanalyzer.report"
    r = shell('"$@"', "report", DEMO, "-o", tmp_path / "r.html", "-q")
    assert r.returncode == 0 and (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_breakdown_to_a_parquet_name_writes_parquet(tmp_path):
    r = shell('"$@"', "breakdown", DEMO, "-o", tmp_path / "x.parquet")
    assert r.returncode == 0, r.stderr
    got = pl.read_parquet(tmp_path / "x.parquet")
    r = shell('"$@"', "breakdown", DEMO, "-f", "csv")
    want = pl.read_csv(io.StringIO(r.stdout))
    assert got.equals(want.cast(got.schema)) and got.height == 3  # the demo trace's 3 steps
    parts = ["compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns"]
    assert (got.select(pl.sum_horizontal(parts)).to_series() == got["duration_ns"]).all()


@pytest.mark.parametrize("name", sorted(n for n, c in GROUP.commands.items() if {"output", "format"} <= {p.name for p in c.params}))
def test_every_command_refuses_a_format_its_output_name_contradicts(name, tmp_path, capsys):
    """A usage error (exit 2) naming the file, before any work and with nothing written: -f
    against the extension, and an extension the command has no format for."""
    command = GROUP.commands[name]
    formats = param_kind(next(p for p in command.params if p.name == "format"))[1]
    args = [str(a).format(tmp=tmp_path, store=tmp_path / "store") for a in COMMANDS[name][1:]]
    args = [a for i, a in enumerate(args) if a != "-o" and (i == 0 or args[i - 1] != "-o")]
    other = next(f for f in formats if f != "json")
    out = tmp_path / "x.json"
    assert main([name, *args, "-o", str(out), "-f", other]) == 2
    err = capsys.readouterr().err
    assert err == (f"traceanalyzer {name}: usage error: Invalid value for '--output' / '-o': {out}: the name says json (.json) "
                   f"but -f {other} was given; drop -f, or give -f json (see traceanalyzer {name} --help)\n")
    missing = next(e for e, f in OUTPUT_EXTENSIONS.items() if f not in formats)
    out = tmp_path / f"x{missing}"
    assert main([name, *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"traceanalyzer {name}: usage error: Invalid value for '--output' / '-o': {out}: {name} cannot write {missing} "
                   f"files (formats: {', '.join(formats)}); give a name with another extension (see traceanalyzer {name} --help)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_json_name_writes_json_in_every_command_that_has_it(tmp_path):
    """Without -f: predict, gate and kernels (a report-like document, a verdict, a table)."""
    for args in (["predict", "-c", CONFIG], ["kernels", DEMO]):
        out = tmp_path / f"{args[0]}.json"
        r = shell('"$@"', *args, "-o", out)
        assert r.returncode == 0, r.stderr
        assert orjson.loads(out.read_bytes())
