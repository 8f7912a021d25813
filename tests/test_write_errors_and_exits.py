"""Write errors and the exit codes of the remaining hostile cases, run as a user would
(subprocesses):

* standard output that cannot be written (``> /dev/full``, closed, read-only): one line, exit 3
  (never exit 1 "internal error");
* the name of ``-o`` picks the format (``report -o r.md`` is Markdown); ``-f`` against it, or an
  extension the command cannot write, is a usage error naming the file;
* an unreadable input is exit 3; a directory mixing Kineto ranks with an Nsight Systems export
  exit 4 naming both; a command that needs a run configuration, without ``-c``, exit 2; Megatron
  virtual-pipeline settings of 0 exit 7 naming the key; Ctrl-C during ``batch`` leaves no
  process behind, not even a zombie (tested as a child subreaper, which inherits any orphan).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import polars as pl
import pytest
import typer

from conftest import DEMO, DLRM, FIXTURES, PYTHONPATH, ROOT, batch_root
from test_fresh_install import COMMANDS
from traceanalyzer.cli import app, main
from traceanalyzer.commands.common import param_kind

GROUP = typer.main.get_command(app)
#: the documented rule (docs/usage.md, Output files): these extensions pick the format
OUTPUT_EXTENSIONS = {".md": "markdown", ".markdown": "markdown", ".json": "json", ".html": "html", ".htm": "html",
                     ".csv": "csv", ".parquet": "parquet"}

ENV = {**os.environ, "PYTHONPATH": PYTHONPATH}
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


# ---------------------------------------------------------------------------------------------
# the exit codes of the remaining hostile inputs

#: run a command without the power of root to read any file (tests run as root, and chmod does
#: not stop root): root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH, else the nobody user
_NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _unprivileged(probe: Path) -> list[str] | None:
    """A prefix under which ``probe`` (mode 000) cannot be read while Python still runs."""
    if os.geteuid() != 0:
        return []
    for prefix in (_NO_DAC, _NOBODY):
        try:
            r = subprocess.run([*prefix, sys.executable, "-c", f"open({str(probe)!r}).read()"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode != 0 and "PermissionError" in r.stderr:
            return prefix
    return None


def test_an_unreadable_input_is_exit_3_naming_it(tmp_path):
    trace, config = tmp_path / "t.json.gz", tmp_path / "run.toml"
    trace.write_bytes(DEMO.read_bytes())
    config.write_text(CONFIG.read_text())
    for f in (trace, config):
        f.chmod(0)
    tmp_path.chmod(0o755)
    prefix = _unprivileged(trace)
    if prefix is None:
        pytest.skip("no way to drop root's power to read any file here (setpriv missing, or Python unreachable for nobody)")
    cases = [(["breakdown", trace], f"traceanalyzer: error: {trace}: permission denied"),
             (["kernels", trace, "-f", "json"], f"traceanalyzer: error: {trace}: permission denied"),
             (["predict", "-c", config], f"traceanalyzer: error: {config}: cannot read the configuration file: Permission denied")]
    for args, line in cases:
        r = subprocess.run([*prefix, sys.executable, "-m", "traceanalyzer", *map(str, args)], capture_output=True, text=True,
                           env={**ENV, "TRACEANALYZER_CACHE": str(tmp_path / "cache")}, cwd=ROOT)
        assert r.returncode == 3, (args, r.stderr)
        assert errors(r.stderr) == [line]


def test_a_directory_mixing_a_kineto_rank_with_an_nsys_export_is_exit_4_naming_both(tmp_path):
    kineto = sorted(DLRM.glob("worker5_*"))[0]
    for export in ("mock_cut.sqlite", "mfu_2gpu_before_cut.jsonl"):
        d = tmp_path / export
        d.mkdir()
        (d / kineto.name).write_bytes(kineto.read_bytes())
        (d / export).write_bytes((FIXTURES / "nsys" / export).read_bytes())
        r = shell('"$@"', "breakdown", d)
        assert r.returncode == 4, r.stderr
        assert errors(r.stderr) == [f"traceanalyzer: error: {d / export}: an Nsight Systems export mixed with a Kineto trace "
                                    f"({d / kineto.name}): the ranks of one job come from one profiler; analyse them separately"]
    import traceanalyzer as ta
    from traceanalyzer.errors import InvalidTrace

    with pytest.raises(InvalidTrace, match="mixed with a Kineto trace"):
        ta.load(tmp_path / "mock_cut.sqlite")


@pytest.mark.parametrize("args", [["reconcile", DEMO], ["predict"], ["whatif", "--set", "pp=2"]], ids=["reconcile", "predict", "whatif"])
def test_a_command_that_needs_a_run_configuration_without_c_is_a_usage_error(args, capsys):
    assert main([*map(str, args)]) == 2
    name = args[0]
    assert capsys.readouterr().err == (f"traceanalyzer {name}: usage error: Missing option '-c' / '--config' (a run configuration, TOML; "
                                       f"or --megatron-args FILE) (see traceanalyzer {name} --help)\n")


@pytest.mark.parametrize("flag,key", [("--num-layers-per-virtual-pipeline-stage", "num_layers_per_virtual_pipeline_stage"),
                                      ("--virtual-pipeline-model-parallel-size", "virtual_pipeline_model_parallel_size")])
def test_zero_virtual_pipeline_settings_are_refused_naming_the_key(flag, key, tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                      "--seq-length 2048 --micro-batch-size 1 --global-batch-size 64 --vocab-size 32000 "
                      f"--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 {flag} 0 --bf16\n")
    hw = tmp_path / "hw.toml"
    hw.write_text('[hardware]\ngpu = "H100 SXM"\n')
    assert main(["predict", "--megatron-args", str(script), "-c", str(hw)]) == 7
    err = capsys.readouterr().err
    assert err.startswith(f"traceanalyzer: error: {script}: {key} ({flag}) = 0 must be at least 1"), err
    # a valid value is read: 32 layers / (pp 2 · 4 layers per virtual stage) = 4 virtual stages; 2 as given
    script.write_text(script.read_text().replace(f"{flag} 0", f"{flag} 4" if "layers" in flag else f"{flag} 2"))
    assert main(["predict", "--megatron-args", str(script), "-c", str(hw)]) == 0
    assert ("VP4" if "layers" in flag else "VP2") in capsys.readouterr().out


#: run a command as the child of a child subreaper: every process it leaves behind becomes ours,
#: zombie or alive, and is listed (then reaped). SIGINT to its process group once its worker
#: processes are running.
_SUBREAPER = r"""
import ctypes, json, os, signal, subprocess, sys, time
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
def workers():
    try:
        kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
        return [k for k in kids if "spawn_main" in open(f"/proc/{k}/cmdline").read()]
    except OSError:
        return []
deadline = time.monotonic() + 120
while len(workers()) < 2 and p.poll() is None and time.monotonic() < deadline:
    time.sleep(0.05)
seen = len(workers())
os.killpg(p.pid, signal.SIGINT)
err = p.communicate(timeout=120)[1].decode()
time.sleep(1.0)  # a helper that outlived its parent ends now, as our zombie
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        cmd = open(f"/proc/{pid}/cmdline").read().replace("\0", " ")
    except OSError:
        continue
    state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
    if int(ppid) == os.getpid():
        left.append([int(pid), state, cmd[:100]])
for pid, _, _ in left:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
print(json.dumps({"rc": p.returncode, "stderr": err, "workers": seen, "left": left}))
"""


def test_ctrl_c_during_batch_leaves_no_process_not_even_a_zombie(tmp_path):
    root = batch_root(tmp_path / "root")
    r = subprocess.run([sys.executable, "-c", _SUBREAPER, sys.executable, "-m", "traceanalyzer", "batch", str(root), "--store",
                        str(tmp_path / "s"), "--workers", "2", "--no-cache", "--quiet"], capture_output=True, text=True, env=ENV, cwd=ROOT,
                       timeout=300)
    res = orjson.loads(r.stdout)
    assert res["workers"] >= 2, res  # interrupted while its workers ran
    assert res["rc"] == 130 and res["stderr"] == "traceanalyzer: interrupted\n", res
    assert res["left"] == [], res
