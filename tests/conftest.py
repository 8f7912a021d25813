from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
#: the shared traces: ``../shared`` beside the checkout (as CI lays it out), or the folder named by
#: ``TRACEANALYZER_TEST_SHARED`` (a checkout elsewhere, e.g. a git worktree)
SHARED = Path(os.environ.get("TRACEANALYZER_TEST_SHARED") or ROOT.parent / "shared")
TRACES = SHARED / "traces"
DEMO = FIXTURES / "kineto" / "mi300x_resnet_act_checkpoint_rank0.json.gz"
DLRM = FIXTURES / "kineto" / "dlrm-v100-8rank"


def _package() -> Path:
    """The folder of the traceanalyzer the tests import: the installed one (``pip install
    '.[test]'``: the package is under src/, so the checkout's root never shadows it), or the
    folder PYTHONPATH names first (src/ for a developer's in-place build)."""
    import traceanalyzer

    if traceanalyzer.__file__ is None:  # a namespace package: a stale folder, nothing installed
        raise pytest.UsageError("traceanalyzer is not installed: run pip install '.[test]' (or pip install -e .) first")
    return Path(traceanalyzer.__file__).resolve().parent


#: the package the tests import, and whose files they read (py.typed, the sources, the schemas)
PACKAGE = _package()
#: PYTHONPATH for every process a test starts: the imported package's parent first (so that
#: ``python -m traceanalyzer`` runs the very package the tests import), then the repository root
#: (the tests' and scripts' helpers); the interpreter's own site-packages is left out, as every
#: process of this interpreter has it already, in its place after the standard library
_SITE = {str(Path(p).resolve()) for p in (*site.getsitepackages(), site.getusersitepackages())}
PYTHONPATH = os.pathsep.join([*([str(PACKAGE.parent)] if str(PACKAGE.parent) not in _SITE else []), str(ROOT)])


def _decoder_choice() -> None:
    """The Kineto decoder the suite runs (and every CLI it starts): ``TRACEANALYZER_DECODER`` as
    set (``native`` or ``python``: run the suite once with each), else the compiled one when it
    is built. A choice made is a choice said: no notice about a missing compiled decoder."""
    import os

    if not os.environ.get("TRACEANALYZER_DECODER", "").strip():
        from traceanalyzer.parsers import decoder

        os.environ["TRACEANALYZER_DECODER"] = "native" if decoder._compiled() is not None else "python"


_decoder_choice()


#: in CI (``CI=true``) every test must run: a skip is reported as a failure
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

#: the optional extras the training-loop tests need, and the modules each brings
EXTRA_MODULES = {"torch": ("torch",), "lightning": ("torch", "lightning"), "hf": ("torch", "transformers", "accelerate"),
                 "mlflow": ("mlflow",)}
#: the one way a CI run may leave out an optional extra: name it in this variable (comma-separated,
#: e.g. ``TRACEANALYZER_CI_ABSENT_EXTRAS=torch,lightning,hf,mlflow`` in .ci/floors, which installs
#: no training framework); the tests of an extra named there skip with ABSENT_TAG in the reason,
#: and only those skips are not turned into failures
ABSENT_EXTRAS_ENV = "TRACEANALYZER_CI_ABSENT_EXTRAS"
ABSENT_OK = {e.strip() for e in os.environ.get(ABSENT_EXTRAS_ENV, "").split(",") if e.strip()}
ABSENT_TAG = f"[absent extra allowed by {ABSENT_EXTRAS_ENV}]"


def needs_extra(extra: str) -> pytest.MarkDecorator:
    """A mark that skips a test (at setup, where the CI hook below sees it) when a module of the
    optional ``extra`` is not installed; in CI that skip is a failure unless ``extra`` is named
    in ``TRACEANALYZER_CI_ABSENT_EXTRAS``."""
    import importlib.util

    missing = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
    reason = f"{', '.join(missing)} not installed (optional extra: pip install 'traceanalyzer[{extra}]')"
    if extra in ABSENT_OK:
        reason += f" {ABSENT_TAG}"
    return pytest.mark.skipif(bool(missing), reason=reason)


def shared_or_skip(params: list, what: str = "shared traces", where: Path | None = None, arity: int | None = None) -> list:
    """``params`` for a parametrisation over shared files, or, when their folder is absent, one
    parameter (of ``arity`` values, by default that of the first of ``params``, else 1) that
    skips with the reason: a visible skip, never a silently empty or smaller parametrisation."""
    where = where or TRACES
    if where.exists() and params:
        return params
    if arity is None:
        first = params[0].values if params and hasattr(params[0], "values") else None
        arity = len(first) if first is not None else 1
    values = (where / "absent", *[None] * (arity - 1))
    return [pytest.param(*values, id="shared-absent", marks=pytest.mark.skip(reason=f"{what} not found at {where}"))]


def real_gpu_traces(exclude: str | None = None) -> list:
    """Every real Kineto GPU trace under shared/traces (hta/ and kineto-public/) whose path does
    not contain ``exclude``; one skipping parameter when the shared traces are absent."""
    if not TRACES.exists():
        return shared_or_skip([])
    return sorted(p for d in ("hta", "kineto-public") for p in (TRACES / d).rglob("*.json.gz")
                  if exclude is None or exclude not in str(p))


def needs_shared():
    return pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")


def independent_steps() -> list:
    """``(path, steps)`` for every real trace whose steps ``tests/data/hta_reference.json`` counts
    independently (``raw_steps``: a plain-Python walk over the trace JSON by
    scripts/hta_reference.py, written from docs/validation.md without the package's code): per
    step ``start_ns``, ``span_ns``, ``idle_ns``, ``compute_ns`` (compute + recompute),
    ``exposed_comm_ns``, ``overlapped_comm_ns``, ``other_ns``. One skipping parameter when the
    shared traces are absent."""
    import json

    ref = json.loads((ROOT / "tests" / "data" / "hta_reference.json").read_text())
    out = []
    for job, j in ref["jobs"].items():
        if job.endswith("(folder as one job)"):
            continue
        for entry in j["per_file"].values():
            steps = (entry.get("raw_steps") or {}).get("steps")
            if steps:
                out.append(pytest.param(TRACES / job, steps, id=job.rsplit("/", 1)[-1][:40]))
    return shared_or_skip(out, arity=2)


def interval_union(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of the ``(start, end)`` intervals (empty ones count nothing), by hand."""
    total, end = 0, None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def batch_root(root: Path, runs: int = 4) -> Path:
    """A ``batch`` root of ``runs`` run directories, each holding the first two DLRM rank files."""
    for i in range(runs):
        d = root / f"run{i}"
        d.mkdir(parents=True)
        for f in sorted(DLRM.glob("worker*.json.gz"))[:2]:
            (d / f.name).write_bytes(f.read_bytes())
    return root


def bad_corpus_module():
    """``scripts/make_bad_corpus.py``, imported (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_bad_corpus", ROOT / "scripts" / "make_bad_corpus.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def write_bad_corpus(out: Path) -> dict:
    """The bad-input corpus written into ``out``; its manifest."""
    import orjson

    assert bad_corpus_module().main([str(out)]) == 0
    return orjson.loads((out / "manifest.json").read_bytes())


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as a user would (python -m traceanalyzer), capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        # the width of a pipe is the command's own unless COLUMNS says otherwise: never the caller's terminal
        env={**{k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}, "PYTHONPATH": PYTHONPATH},
    )


#: as root, the capabilities that let it read and write any file whatever its mode
_BYPASS = "-dac_override,-dac_read_search"


def cli_csv(out: Path, *args: str):
    """The table the command line writes with ``-f csv -o out`` after ``args`` (exit 0 asserted)."""
    import polars as pl

    r = run_cli(*args, "-f", "csv", "-o", out)
    assert r.returncode == 0, r.stderr
    return pl.read_csv(out)


def cli_json(*args: str) -> dict:
    """The document the command line prints with ``-f json`` after ``args`` (exit 0 asserted)."""
    import json

    r = run_cli(*args, "-f", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def run_unprivileged(args: list[str]) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` (from the repository root) so that file modes bind: as root (as in
    CI), without the capabilities that bypass them (``setpriv --bounding-set``), so that a
    ``chmod 000`` file really is unreadable; as any other user, as it is."""
    prefix = []
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        prefix = ["setpriv", f"--bounding-set={_BYPASS}"]
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    return subprocess.run([*prefix, sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(autouse=True, scope="session")
def _private_parse_cache(tmp_path_factory):
    """Every test (and every CLI it runs) uses a parse cache of its own, never the user's."""
    import os

    old = os.environ.get("TRACEANALYZER_CACHE")
    os.environ["TRACEANALYZER_CACHE"] = str(tmp_path_factory.mktemp("parse-cache"))
    yield
    if old is None:
        os.environ.pop("TRACEANALYZER_CACHE", None)
    else:
        os.environ["TRACEANALYZER_CACHE"] = old


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ``CI=true`` a skipped test fails: in CI every test runs (the shared traces, pandas,
    duckdb, Ray and Chromium are installed there), so a skip means a broken install step."""
    outcome = yield
    rep = outcome.get_result()
    if IN_CI and rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if ABSENT_TAG in reason:  # an optional extra this CI run says it leaves out (needs_extra)
            return
        rep.outcome = "failed"
        rep.longrepr = f"skipped in CI (CI=true), where every test must run: {reason}"
