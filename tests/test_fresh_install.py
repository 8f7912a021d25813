"""A fresh install with today's newest versions, as a new user gets it (``pip install .``):

* the package imports only what ``pyproject.toml`` declares, and declares nothing it does not
  import (the ``arrow`` extra is for users); no ``import click`` (typer >= 0.29 vendors its own
  copy and no longer installs click);
* ``fcntl`` (POSIX) only where the store is locked for writing: every command imports and runs
  without it, and ``batch`` says in one line why it cannot lock the store (Windows);
* every command, its output piped into a reader that is already gone (``| head -1``), with
  stderr to the same pipe and not: exit 0, no traceback.

The subprocesses run with ``click`` unimportable wherever the installed typer does not need it
(as on a fresh machine), so an ``import click`` of ours fails here as it fails there.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import DEMO, DLRM, FIXTURES, PACKAGE, PYTHONPATH, ROOT

CONFIG = ROOT / "docs" / "examples" / "megatron-readme-70b.toml"
ENV = {**os.environ, "PYTHONPATH": PYTHONPATH}

#: run the CLI with some modules unimportable (``sys.modules[name] = None`` makes ``import name``
#: raise ImportError); click only where the installed typer does not import it itself
LAUNCH = """
import sys
blocked = sys.argv[1].split(",") if sys.argv[1] else []
if "click?" in blocked:
    import typer  # noqa: F401
    blocked.remove("click?")
    if "click" not in sys.modules:
        blocked.append("click")
for name in blocked:
    sys.modules[name] = None
sys.argv = ["traceanalyzer", *sys.argv[2:]]
from traceanalyzer.__main__ import entry
entry()
"""


def cli(*args, block: str = "click?") -> list[str]:
    return [sys.executable, "-c", LAUNCH, block, *map(str, args)]


# ---------------------------------------------------------------------------------------------
# declared imports


def _imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one file (inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _dist(requirement: str) -> str:
    name = requirement.split(";")[0]
    for sep in "<>=!~[ ":
        name = name.split(sep)[0]
    return name.strip().lower().replace("-", "_")


def test_the_package_imports_exactly_what_it_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_dist(r) for r in project["dependencies"]}
    extras = {k: {_dist(r) for r in v} for k, v in project["optional-dependencies"].items()}
    imported: dict[str, set[str]] = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        for name in _imports(f) - set(sys.stdlib_module_names) - {"traceanalyzer", "__future__"}:
            imported.setdefault(name, set()).add(str(f.relative_to(PACKAGE.parent)))
    # every third-party import is a declared runtime dependency, or the optional Ray engine, or
    # a training-loop extra's (mlflow-skinny installs the module mlflow), imported only by the
    # training-loop integrations
    loop = extras["torch"] | extras["lightning"] | extras["hf"] | {"mlflow"}
    assert extras["mlflow"] == {"mlflow_skinny"}
    undeclared = {k: v for k, v in imported.items() if k not in runtime and k not in extras["ray"] and k not in loop}
    assert undeclared == {}, f"imported but not declared in [project] dependencies: {undeclared}"
    outside = {k: {f for f in v if not f.startswith("traceanalyzer/integrations/")} for k, v in imported.items() if k in loop}
    assert all(not v for v in outside.values()), f"training-loop extras imported outside traceanalyzer/integrations: {outside}"
    assert "click" not in imported  # typer >= 0.29 no longer installs it
    # every runtime dependency is imported by the package; pyarrow is the users' extra only
    assert runtime - set(imported) == set(), f"declared but never imported: {runtime - set(imported)}"
    assert "pyarrow" not in runtime and extras["arrow"] == {"pyarrow"}


def test_the_platform_only_lock_is_imported_where_the_store_locks():
    """``fcntl`` only inside ``Store.writer``: on a platform without it (Windows) every command
    still imports (fcntl blocked here as it is missing there)."""
    files = sorted(str(f.relative_to(PACKAGE.parent)) for f in PACKAGE.rglob("*.py") if "fcntl" in _imports(f))
    assert files == ["traceanalyzer/store/database.py"]
    top = {a.name for n in ast.parse((PACKAGE / "store" / "database.py").read_text()).body if isinstance(n, ast.Import) for a in n.names}
    assert "fcntl" not in top


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store with the 8-rank DLRM run (the fixture directory as one run)."""
    root = tmp_path_factory.mktemp("store")
    r = subprocess.run(cli("batch", DLRM, "--store", root / "s", "--quiet"), capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return root / "s"


def test_without_fcntl_reading_a_store_works_and_batch_says_why_it_cannot_write(store, tmp_path):
    r = subprocess.run(cli("trend", "--store", store, "-f", "json", block="click?,fcntl"), capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run(cli("batch", DLRM, "--store", tmp_path / "s", "--quiet", block="click?,fcntl"), capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.returncode == 3, r.stderr
    assert r.stderr == (f"traceanalyzer: error: {tmp_path / 's'}: cannot lock the store for writing: this platform has no "
                        "POSIX file locks (fcntl); run batch on Linux or macOS (trend and gate read a store anywhere)\n")
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------------------------
# every command into a closed pipe

#: one invocation of every command on the bundled fixtures (test_every_command_is_listed keeps
#: this list complete as commands are added)
COMMANDS = {
    "breakdown": ["breakdown", DLRM, "--detail"],
    "report": ["report", DEMO, "-f", "json"],
    "kernels": ["kernels", DEMO],
    "ops": ["ops", DEMO],
    "reconcile": ["reconcile", DEMO, "-c", CONFIG],
    "compare": ["compare", *sorted(DLRM.glob("worker[07]_*"))],
    "predict": ["predict", "-c", CONFIG],
    "whatif": ["whatif", "-c", CONFIG, "--set", "pp=2"],
    "memory": ["memory", "-c", CONFIG],
    "annotate": ["annotate", DEMO, "-o", "{tmp}/a.json"],
    "batch": ["batch", DLRM, "--store", "{tmp}/store"],
    "trend": ["trend", "--store", "{store}"],
    "gate": ["gate", "--store", "{store}"],
    "baseline": ["baseline", FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt"],
    "plan": ["plan", "-c", FIXTURES / "plan" / "bloom_176b.toml", "--tokens", "366e9", "--tflops", "150"],
    "launches": ["launches", DEMO],
    "annotations": ["annotations", DEMO],
    "critical-path": ["critical-path", DEMO],
    "stragglers": ["stragglers", DEMO],
}


def test_every_command_is_listed():
    import typer

    from traceanalyzer.cli import app

    assert set(COMMANDS) == set(typer.main.get_command(app).commands)


@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout", "stdout+stderr"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_into_a_closed_pipe_exits_0(name, stderr_too, store, tmp_path):
    """``traceanalyzer ... | head -1`` (and ``2>&1 | head -1``) where the reader is gone before
    anything is written: the traceanalyzer process's own exit status is 0 and it prints no
    traceback (with stderr to the pipe too, nothing can be read: its exit status says it)."""
    args = [str(a).format(tmp=tmp_path, store=store) for a in COMMANDS[name]]
    p = subprocess.Popen(cli(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE,
                         env=ENV, cwd=ROOT)
    p.stdout.close()
    err = "" if stderr_too else p.stderr.read().decode()
    assert p.wait(timeout=300) == 0, err
    assert "Traceback" not in err and "error" not in err, err


def test_head_1_of_a_command_prints_its_first_line_and_exits_0():
    """The pipeline itself, as typed in a shell, with stderr into the pipe as well."""
    r = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" 2>&1 | head -1', "sh",
                        *cli("breakdown", DLRM, "--detail")], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1 and "Traceback" not in r.stdout, r.stdout
