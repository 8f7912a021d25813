from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"
DEMO = FIXTURES / "kineto" / "mi300x_resnet_act_checkpoint_rank0.json.gz"
DLRM = FIXTURES / "kineto" / "dlrm-v100-8rank"


def real_gpu_traces() -> list[Path]:
    """Every real Kineto GPU trace under shared/traces (hta/ and kineto-public/)."""
    if not TRACES.exists():
        return []
    return sorted(p for d in ("hta", "kineto-public") for p in (TRACES / d).rglob("*.json.gz"))


def needs_shared():
    return pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI as a user would (python -m traceanalyzer), capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "traceanalyzer", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        # the width of a pipe is the command's own unless COLUMNS says otherwise: never the caller's terminal
        env={**{k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}, "PYTHONPATH": str(ROOT)},
    )


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
