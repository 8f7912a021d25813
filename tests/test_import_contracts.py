"""The package's layout holds: ``lint-imports`` keeps every contract of pyproject.toml (layers,
no cycles between packages, classifiers that never load a trace, ...). What import-linter cannot
see (modules named in strings: the API registry, the engine's optional tables) is checked in
tests/test_api_promises.py::test_the_optional_table_registry."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from tests.conftest import PYTHONPATH, ROOT

pytest.importorskip("importlinter", reason="import-linter (the test extra) is not installed")

RUN = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}  # the package the tests import (lint-imports finds it there)
    return subprocess.run([sys.executable, "-c", RUN, "--no-cache", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_every_import_contract_is_kept():
    r = _lint()
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert len(contracts) >= 5
    assert f"Contracts: {len(contracts)} kept, 0 broken." in r.stdout


def test_a_broken_contract_fails(tmp_path):
    """The check can fail: the classifiers importing the engine (as they did) breaks it."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "traceanalyzer"\n\n'
        '[[tool.importlinter.contracts]]\nname = "engine imports no classifier"\ntype = "forbidden"\n'
        'source_modules = ["traceanalyzer.engine"]\nforbidden_modules = ["traceanalyzer.classify"]\n'
    )
    r = _lint("--config", str(config))
    assert r.returncode == 1 and "BROKEN" in r.stdout
    assert "traceanalyzer.engine.rank -> traceanalyzer.classify" in r.stdout
