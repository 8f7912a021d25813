"""Write errors and the exit codes of the remaining hostile cases, run as a user would
(subprocesses):

* standard output that cannot be written (``> /dev/full``, closed, read-only): one line, exit 3
  (never exit 1 "internal error");
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import DEMO, ROOT

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
