"""Outputs, signals and exit codes, run as a user would (subprocesses) on the generated corpus
(``scripts/make_bad_corpus.py``: ``outputs/`` and the manifest's ``commands``).

* ``-o`` naming an input -- same path, symlink, hard link, ``../`` spelling, a file of an input
  directory, a config, either ``compare`` input, a store file -- exits 3 in one line naming the
  output, and every input keeps its bytes and inode;
* every output problem (missing directory, a directory, a name too long, a full disk) exits 3;
* SIGINT / SIGTERM at random moments: exit 130 / 143, one "interrupted" line, the existing output
  unchanged or replaced whole, no temporary file left; Ctrl-C of ``batch`` leaves no worker;
* a closed stdout pipe (``| head``) exits 0 quietly; an escaping ``BaseException`` is exit 1 in
  one line; user text that looks like rich markup is printed as it is.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from conftest import DLRM, PYTHONPATH, ROOT, batch_root, run_cli, write_bad_corpus

ENV = {**os.environ, "PYTHONPATH": PYTHONPATH}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("corpus")
    return out, write_bad_corpus(out)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: (kind, inode, sha256 of the bytes) -- links as links."""
    snap = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        if p.is_symlink():
            snap[str(p.relative_to(root))] = ("link", os.readlink(p))
        elif p.is_file():
            snap[str(p.relative_to(root))] = ("file", st.st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            snap[str(p.relative_to(root))] = ("dir", st.st_ino)
    return snap


def one_error_line(r: subprocess.CompletedProcess, names: str) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("traceanalyzer: error: ") and names in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    return lines[0]


@pytest.mark.parametrize("case", ["output-is-input", "output-problem"])
def test_an_output_problem_is_refused_in_every_command_naming_the_path(corpus, case):
    """An output naming an input (nothing on stdout either), or one that cannot be written (exit
    3): one error line naming the output, and the outputs' directory unchanged (bytes, inodes,
    links; no directory created, no temporary left)."""
    root, manifest = corpus
    cmds = {k: v for k, v in manifest["commands"].items() if v["case"] == case}
    assert {v["args"][0] for v in cmds.values()} == {"breakdown", "report", "annotate", "predict", "reconcile", "compare"}
    before = snapshot(root / "outputs")
    for name, c in sorted(cmds.items()):
        r = run_cli(*c["args"], cwd=root)
        assert r.returncode == (3 if case == "output-problem" else c["exit"]), (name, r.stderr)
        line = one_error_line(r, c["output"])
        assert c["message"] in line, (name, line)
        assert case == "output-problem" or r.stdout == "", name
        assert snapshot(root / "outputs") == before, name


def test_trend_and_batch_never_write_over_the_store(corpus, tmp_path):
    root, _ = corpus
    store = tmp_path / "store"
    r = run_cli("batch", root / "outputs" / "ranks", "--store", store, "--workers", "1", "--no-cache")
    assert r.returncode == 0, r.stderr
    stored = sorted(store.glob("runs/date=*/*.parquet"))
    assert len(stored) == 1
    before = snapshot(store)
    for out in (stored[0], stored[0].parent / ".." / stored[0].parent.name / stored[0].name):
        r = run_cli("trend", "--store", store, "-o", out)
        assert r.returncode == 3, r.stderr
        assert "refusing to overwrite an input" in one_error_line(r, str(out))
    r = run_cli("trend", "--store", store, "-o", tmp_path / "missing" / "t.png")
    assert r.returncode == 3 and "does not exist" in one_error_line(r, "t.png")
    r = run_cli("trend", "--store", store, "-o", tmp_path / "t.png")
    assert r.returncode == 0 and (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert snapshot(store) == before
    # the store named as a file, or inside a missing directory: exit 3, nothing created
    r = run_cli("batch", root / "outputs" / "ranks", "--store", root / "outputs" / "trace.json.gz")
    assert r.returncode == 3 and "not a directory" in one_error_line(r, "trace.json.gz")
    r = run_cli("batch", root / "outputs" / "ranks", "--store", tmp_path / "missing" / "store")
    assert r.returncode == 3 and "does not exist" in one_error_line(r, "missing")
    assert not (tmp_path / "missing").exists()


def test_annotate_two_ranks_with_one_file_name_keeps_both(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    workers = sorted(DLRM.glob("worker*.json.gz"))[:2]
    (a / "trace.json.gz").write_bytes(workers[0].read_bytes())
    (b / "trace.json.gz").write_bytes(workers[1].read_bytes())
    out = tmp_path / "annotated"
    r = run_cli("annotate", a / "trace.json.gz", b / "trace.json.gz", "-o", out)
    assert r.returncode == 0, r.stderr
    import gzip

    got = {p.name: orjson.loads(gzip.decompress(p.read_bytes()))["distributedInfo"]["rank"] for p in out.iterdir()}
    assert got == {"rank0_trace.json.gz": 0, "rank1_trace.json.gz": 1}


# ---------------------------------------------------------------------------------------------
# signals


def _no_temporaries(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.endswith(".tmp")]


def handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (Linux: the SigCgt mask in
    /proc/PID/status; Python itself installs none, traceanalyzer's entry point does)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return False


@pytest.mark.parametrize("command", ["breakdown", "annotate"])
def test_signals_at_random_moments_leave_no_partial_output(tmp_path, command):
    """SIGINT / SIGTERM at random moments over a whole run (start-up, parsing, writing): exit
    130 / 143 with one "interrupted" line, the old output intact or the new one whole, no
    temporary file; a signal after the work is done is a normal exit with the whole output."""
    src = tmp_path / "in"
    src.mkdir()
    for f in sorted(DLRM.glob("worker*.json.gz"))[:2]:
        (src / f.name).write_bytes(f.read_bytes())
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if command == "breakdown":
        target = out_dir / "b.json"
        args = ["breakdown", str(src), "-f", "json", "-o", str(target)]
        files = [target]
    else:
        target = out_dir
        args = ["annotate", str(src), "-o", str(out_dir)]
        files = [out_dir / f.name for f in sorted(src.iterdir())]
    cmd = [sys.executable, "-m", "traceanalyzer", *args]
    # the reference: one undisturbed run
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, env=ENV)
    duration = time.monotonic() - t0
    want = {f: f.read_bytes() for f in files}
    old = {f: b"OLD " + f.name.encode() for f in files}
    rng = random.Random(19)
    interrupted = 0
    # ten moments at least; more while fewer than five landed before the end (the reference
    # run's time is one sample: on a loaded machine the later runs may all be quicker)
    for i in range(40):
        if i >= 10 and interrupted >= 5:
            break
        for f, data in old.items():
            f.write_bytes(data)
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        # the interpreter's own start-up, before any code of ours runs, answers a signal as
        # Python does: the random moment is counted from when our handlers are installed
        started = time.monotonic()
        while not handles_sigterm(p.pid) and p.poll() is None:
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, max(0.05, duration * 1.1 - (time.monotonic() - started))))
        p.send_signal(sig)
        _out, err = p.communicate(timeout=120)
        err = err.decode()
        assert "Traceback" not in err, err
        if p.returncode == 0:  # the signal came after the process had finished
            assert all(f.read_bytes() == want[f] for f in files)
        else:
            interrupted += 1
            assert p.returncode == 128 + sig, (p.returncode, err)
            assert [ln for ln in err.splitlines() if "interrupted" in ln] == ["traceanalyzer: interrupted"], err
            for f in files:  # each file: untouched, or the complete new one
                assert f.read_bytes() in (old[f], want[f]), f
        assert _no_temporaries(out_dir) == []
        assert sorted(out_dir.iterdir()) == sorted(files)
    assert interrupted >= 5  # the moments were not all after the end


def test_ctrl_c_during_batch_stops_every_worker(tmp_path):
    """Ctrl-C in a terminal reaches the whole process group: exit 130, one line, no worker
    traceback, no worker process left."""
    root = batch_root(tmp_path / "root")
    rng = random.Random(7)
    for i in range(3):
        p = subprocess.Popen([sys.executable, "-m", "traceanalyzer", "batch", str(root), "--store", str(tmp_path / f"s{i}"),
                              "--workers", "2", "--no-cache", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
                             start_new_session=True)
        time.sleep(rng.uniform(2.0, 4.0))
        children = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        os.killpg(p.pid, signal.SIGINT)
        _out, err = p.communicate(timeout=120)
        err = err.decode()
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        if p.returncode != 0:
            assert p.returncode == 130 and err.strip().splitlines() == ["traceanalyzer: interrupted"], err
        time.sleep(0.5)
        alive = []
        for c in children:
            try:
                state = Path(f"/proc/{c}/stat").read_text().split()[2]
            except OSError:
                continue
            if state != "Z":
                alive.append(c)
        assert alive == [], alive
        assert not list((tmp_path / f"s{i}").rglob("*.tmp"))


# ---------------------------------------------------------------------------------------------
# closed pipes, escaping exceptions, markup


@pytest.mark.parametrize("args", [
    ["breakdown", str(DLRM), "--detail"],
    ["breakdown", str(DLRM), "-f", "json"],
    ["predict", "--config", str(ROOT / "docs" / "examples" / "megatron-readme-70b.toml")],
    ["--version"],
])
def test_a_closed_stdout_pipe_exits_0_quietly(args):
    """``traceanalyzer ... | head -1``: the reader is gone before anything is written. The
    traceanalyzer process's own exit status, not the pipeline's."""
    p = subprocess.Popen([sys.executable, "-m", "traceanalyzer", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "error" not in err, err


def test_an_escaping_base_exception_is_exit_1_in_one_line(monkeypatch, capsys):
    from polars.exceptions import PanicException

    from traceanalyzer.api import commandline
    from traceanalyzer.cli import main

    def boom(*_a, **_k):
        raise PanicException("called `Option::unwrap()` on a `None` value\nnote: run with RUST_BACKTRACE=1")

    monkeypatch.setattr(commandline, "analyse_files", boom)
    assert issubclass(PanicException, BaseException) and not issubclass(PanicException, Exception)
    assert main(["breakdown", str(DLRM), "-f", "json"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("traceanalyzer: internal error: PanicException: called"), err


def test_permission_denied_anywhere_is_exit_3_in_one_line(monkeypatch, capsys, tmp_path):
    """(chmod cannot deny root, so the OS error is raised where the OS would raise it.)"""
    import tempfile

    from traceanalyzer.api import commandline
    from traceanalyzer.cli import main

    def denied(*_a, **_k):
        raise PermissionError(13, "Permission denied", str(tmp_path / "locked.json"))

    monkeypatch.setattr(commandline, "analyse_files", denied)
    assert main(["breakdown", str(DLRM)]) == 3
    assert capsys.readouterr().err == f"traceanalyzer: error: {tmp_path / 'locked.json'}: Permission denied\n"
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "mkstemp", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    out = tmp_path / "b.json"
    assert main(["breakdown", str(DLRM), "-f", "json", "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"traceanalyzer: error: {out}: cannot write: permission denied (the directory is not writable)"
    assert not out.exists()


def test_user_text_that_looks_like_markup_is_printed_as_it_is(corpus):
    root, manifest = corpus
    r = run_cli("breakdown", root / "markup" / "category_closing_tag.json", "--detail")
    assert r.returncode == 0, r.stderr
    assert "unknown categories '[/]' (1)" in r.stderr
    r = run_cli("breakdown", root / "markup" / "kernel_and_op_names.json", "--detail")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = run_cli("report", root / "markup" / "kernel_and_op_names.json", "-f", "markdown", "-o", root / "markup" / "r.md")
    assert r.returncode == 0, r.stderr
    text = (root / "markup" / "r.md").read_text()
    assert "`[bold red]kernel[/bold red] [link=x]`" in text and "`[/]`" in text


# ---------------------------------------------------------------------------------------------
# the output module itself


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path):
    from traceanalyzer.interrupts import Interrupted
    from traceanalyzer.outputs import Outputs

    out = tmp_path / "o.json"
    out.write_bytes(b"old")
    os.chmod(out, 0o640)
    for exc in (Interrupted(signal.SIGTERM), OSError(28, "No space left on device"), ValueError("bug")):
        with pytest.raises(BaseException):
            with Outputs().open(out) as fh:
                fh.write(b"new and half")
                raise exc
        assert out.read_bytes() == b"old" and os.listdir(tmp_path) == ["o.json"]
    Outputs().write_bytes(out, b"new")
    assert out.read_bytes() == b"new" and os.stat(out).st_mode & 0o777 == 0o640  # permissions kept
    # through a symlink: the file it points to is replaced, the link stays a link
    link = tmp_path / "link.json"
    link.symlink_to("o.json")
    Outputs().write_bytes(link, b"newer")
    assert link.is_symlink() and out.read_bytes() == b"newer"


def test_a_markdown_reports_pngs_never_replace_an_input(tmp_path):
    """The PNGs beside ``rep.md`` are ``rep_<plot>.png``: a config that happens to bear one of
    those names is refused before any file is written."""
    from conftest import DEMO

    cfg = tmp_path / "rep_timeline.png"
    cfg.write_bytes((ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml").read_bytes())
    before = snapshot(tmp_path)
    r = run_cli("report", DEMO, "--config", cfg, "-f", "markdown", "-o", tmp_path / "rep.md")
    assert r.returncode == 3, r.stderr
    assert "refusing to overwrite an input" in one_error_line(r, str(cfg))
    assert snapshot(tmp_path) == before  # no report, no other PNG


def test_a_signal_inside_a_callback_is_not_lost_or_printed():
    """A signal that lands while Python runs a callback whose exceptions it cannot propagate
    (a weakref or import-lock callback at the end of a run) used to print "Exception ignored ...
    Traceback" and be lost; it is raised when the signal-handling block ends instead."""
    code = """
import gc, signal, weakref
from traceanalyzer.interrupts import Interrupted, catch_signals
class A: pass
def cb(_):
    signal.raise_signal(signal.SIGTERM)
    sum(range(1000))  # the handler runs here, inside the callback
try:
    with catch_signals():
        a = A(); r = weakref.ref(a, cb); del a; gc.collect()
        print("went on")
except Interrupted as exc:
    print("raised at the end:", exc.exit_code)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert done.stdout.split("\n")[:2] == ["went on", "raised at the end: 143"]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_a_signal_that_native_code_prints_is_not_printed_or_lost():
    """Native code that calls back into Python (an import from a library's own thread pool or
    callback) may hand the error to ``PyErr_Print``, which shows it with ``sys.excepthook``:
    an Interrupted raised there printed "Traceback ... Interrupted: SIGINT" before the one
    "interrupted" line. Inside the block it is kept, not printed, and raised when the block
    ends; any other error is still printed as before."""
    code = """
import ctypes, signal, sys
from traceanalyzer.interrupts import Interrupted, catch_signals
def native(code):  # C code that runs Python and prints the error it cannot return (PyErr_Print)
    return ctypes.pythonapi.PyRun_SimpleString(code)
try:
    with catch_signals():
        native(b"import signal; signal.raise_signal(signal.SIGINT); sum(range(1000))")
        native(b"raise ValueError('shown')")
        print("went on")
except Interrupted as exc:
    print("raised at the end:", exc.exit_code)
print(sys.excepthook is sys.__excepthook__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert done.stdout.split("\n")[:3] == ["went on", "raised at the end: 130", "True"], done.stdout + done.stderr
    assert "Interrupted" not in done.stderr, done.stderr
    assert "ValueError: shown" in done.stderr


def test_a_signal_turned_into_another_exception_by_native_code_is_still_a_signal():
    """polars calls back into Python; an Interrupted raised there comes out as a TypeError
    ("... is not a Polars data type"). The signal block still ends in Interrupted, and a handler
    that would record the error as the input's fault (batch: a failed run) re-raises it first."""
    code = """
import signal
from traceanalyzer.interrupts import Interrupted, catch_signals, check
def native():  # what pyo3 does with an exception raised in a callback
    try:
        signal.raise_signal(signal.SIGINT); sum(range(1000))
    except BaseException as exc:
        raise TypeError("'<unprintable str object>' is not a Polars data type") from None
try:
    with catch_signals():
        try:
            native()
        except Exception:
            check()
            print("recorded as a failed run")
except Interrupted as exc:
    print("interrupted:", exc.exit_code)
try:
    with catch_signals():
        native()
except Interrupted as exc:
    print("interrupted:", exc.exit_code, type(exc.__cause__).__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert done.stdout.split("\n")[:2] == ["interrupted: 130", "interrupted: 130 TypeError"], done.stdout + done.stderr
