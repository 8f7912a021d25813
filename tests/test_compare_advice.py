"""``compare A B`` checks A's advice against B. On the shared H200 pair ``recompute`` -> ``base``
(the same model without activation recompute), the recompute finding's predicted gain is within
5 % of the measured step difference (``truth.json``: the unprofiled step medians, timed outside the
profiler), and the measured change beside it is the difference of the traces' step means (the
``ProfilerStep#N`` ranges, read from the raw JSON)."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import ROOT, TRACES, run_cli

H200 = TRACES / "h200"
CFG = ROOT / "fixtures" / "configs"
pytestmark = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _trace(run: str):
    return H200 / run / "rank0.pt.trace.json.gz"


def _step_mean_ms(run: str) -> float:
    ev = json.loads(gzip.decompress(_trace(run).read_bytes()))["traceEvents"]
    durs = [e["dur"] for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    return sum(durs) / len(durs) / 1e3


@pytest.mark.parametrize("configs", [("-c", CFG / "h200_recompute.toml"),
                                     ("--config-a", CFG / "h200_recompute.toml", "--config-b", CFG / "h200_base.toml")],
                         ids=["time-with-c", "waterfall"])
def test_recompute_gain_came_on_the_next_run(configs):
    truth = {r: json.loads((H200 / r / "truth.json").read_text()) for r in ("recompute", "base")}
    assert truth["recompute"]["config"]["recompute"] and not truth["base"]["config"]["recompute"]
    real = 1e3 * (truth["recompute"]["step_s_median"] - truth["base"]["step_s_median"])
    res = run_cli("compare", _trace("recompute"), _trace("base"), *configs, "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    row = next(r for r in doc["advice"] if r["loss"] == "recompute")
    assert row["change"] == "recompute=none" and row["predicted_gain_ms"] > 0
    assert abs(row["predicted_gain_ms"] - real) <= 0.05 * real, (row["predicted_gain_ms"], real)
    # the partition's steps are the GPU windows, each within a few µs of its host range
    assert row["measured_gain_ms"] == pytest.approx(_step_mean_ms("recompute") - _step_mean_ms("base"), abs=0.1)
    assert row["b_ms_per_step"] == 0.0 and row["verdict"] == "came"
