"""The typed surface: ``mypy --strict`` passes on the files ``pyproject.toml`` names
(``[tool.mypy]``: the API, the types the layers hand each other, the renderers, the package's
stub); no verb of the public API and no field of a result object has ``Any`` in its type, as
mypy sees them (aliases and TypedDicts expanded); and the stub ``traceanalyzer/__init__.pyi``
re-exports exactly the registry of ``traceanalyzer/__init__.py``, each name from the module the
registry loads it from (a re-export: the signatures type checkers read are the real ones)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import traceanalyzer

pytest.importorskip("mypy", reason="mypy (the test extra) is not installed")

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
VERBS = [n for n in traceanalyzer.__all__ if n != "__version__" and not inspect.isclass(getattr(traceanalyzer, n))]
RESULTS = [n for n in traceanalyzer.__all__ if n != "__version__" and inspect.isclass(getattr(traceanalyzer, n))
           and dataclasses.is_dataclass(getattr(traceanalyzer, n)) and hasattr(getattr(traceanalyzer, n), "to_dict")]
ANY = re.compile(r"\bAny\b")


def _probe() -> tuple[str, dict[int, str]]:
    """A module revealing the type of every verb and every public field of the result objects,
    and {line: what it reveals}."""
    lines, what = ["import traceanalyzer as ta", ""], {}
    for name in VERBS:
        what[len(lines) + 1] = name
        lines.append(f"reveal_type(ta.{name})")
    for name in RESULTS:
        lines.append(f"def _{name}(r: ta.{name}) -> None:")
        for f in dataclasses.fields(getattr(traceanalyzer, name)):
            if not f.name.startswith("_"):
                what[len(lines) + 1] = f"{name}.{f.name}"
                lines.append(f"    reveal_type(r.{f.name})")
        what[len(lines) + 1] = f"{name}.to_dict"
        lines.append("    reveal_type(r.to_dict)")
    return "\n".join(lines) + "\n", what


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory):
    """mypy as configured (its files, strict) and the probe, in one run; a cache of its own (two
    test processes never share one)."""
    tmp = tmp_path_factory.mktemp("mypy")
    text, what = _probe()
    probe = tmp / "probe.py"
    probe.write_text(text, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp / "cache"),
                        "--no-color-output", "--show-error-codes", *CONFIG["files"], str(probe)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    return r, what, probe


def test_the_typed_surface_passes_mypy_strict(mypy_run):
    r, _, probe = mypy_run
    errors = [ln for ln in r.stdout.splitlines() if ": error:" in ln]
    assert CONFIG["strict"] is True
    assert r.returncode == 0 and not errors, "\n".join(errors) or r.stdout + r.stderr


def test_no_verb_and_no_result_field_is_typed_any(mypy_run):
    r, what, probe = mypy_run
    revealed = {}
    for ln in r.stdout.splitlines():
        m = re.match(rf"{re.escape(str(probe))}:(\d+): note: Revealed type is \"(.*)\"$", ln)
        if m:
            revealed[what[int(m.group(1))]] = m.group(2)
    assert set(revealed) == set(what.values()), r.stdout + r.stderr
    assert {n: t for n, t in revealed.items() if ANY.search(t)} == {}
    # what mypy reveals is the real signature, not a stand-in (a verb typed Any reveals "Any")
    assert revealed["report"].endswith("-> traceanalyzer.results.ReportModel")
    assert "**options: **TypedDict(traceanalyzer.api.layouts.PlanOptions" in revealed["plan"]


def test_the_stub_reexports_exactly_the_registry():
    """``traceanalyzer/__init__.pyi`` names every entry of ``_API`` (and ``__version__``), each
    imported from the module the registry names and re-exported under its own name."""
    tree = ast.parse((Path(traceanalyzer.__file__).parent / "__init__.pyi").read_text(encoding="utf-8"))
    stub: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.asname == alias.name, f"{alias.name}: a re-export is written 'import X as X'"
                stub[alias.name] = f"{node.module}:{alias.name}"
    stub.pop("__version__")
    assert stub == traceanalyzer._API
    assert set(traceanalyzer.__all__) == {*stub, "__version__"}

