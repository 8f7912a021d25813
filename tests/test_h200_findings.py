"""Findings on the real H200 traces: the first finding of ``recompute`` (read with its run
configuration, docs/examples/h200-gpt1.4b-recompute.toml, the model of the folder's
``capture.py``) is recompute, and the what-if model's predicted gain is within 5 % of the measured
difference between the ``recompute`` and ``base`` runs (``truth.json``: unprofiled step medians).
``stalls``' first finding is the host outside every op (its 40 ms sleep); reconcile says when a
configuration contradicts the trace."""

from __future__ import annotations

import json

import pytest

import traceanalyzer as ta
from traceanalyzer.api.loading import pricing_configuration
from traceanalyzer.reconciliation.findings import MAX_FINDINGS, findings

from conftest import ROOT, TRACES, run_cli

H200 = TRACES / "h200"
CFG = ROOT / "docs" / "examples" / "h200-gpt1.4b-recompute.toml"
pytestmark = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _trace(name: str):
    return H200 / name / "rank0.pt.trace.json.gz"


def _truth(name: str) -> dict:
    return json.loads((H200 / name / "truth.json").read_text())


def test_recompute_first_finding_predicts_the_base_run():
    base, rc = _truth("base"), _truth("recompute")
    # the configuration is the traced model
    assert rc["config"]["recompute"] is True and rc["config"]["L"] == 24 and rc["config"]["h"] == 2048
    measured_ms = 1e3 * (rc["step_s_median"] - base["step_s_median"])
    res = run_cli("breakdown", _trace("recompute"), "-c", CFG, "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    f = json.loads(res.stdout)["findings"]
    assert 1 <= len(f) <= MAX_FINDINGS
    assert [x["ms_per_step"] for x in f] == sorted((x["ms_per_step"] for x in f), reverse=True)
    first = f[0]
    assert first["loss"] == "recompute" and first["change"] == "recompute=none"
    assert abs(first["predicted_gain_ms"] - measured_ms) <= 0.05 * measured_ms
    # the same as whatif --set recompute=none says
    w = run_cli("whatif", _trace("recompute"), "-c", CFG, "--set", "recompute=none", "-f", "json", "-q")
    doc = json.loads(w.stdout)
    assert first["predicted_gain_ms"] == pytest.approx(1e3 * (doc["anchor_summary"]["step_time_s"] - doc["predicted"]["step_time_s"]))


def test_without_a_configuration_the_gain_is_null_with_a_reason():
    a = ta.analyze(ta.load(_trace("recompute")))
    f = findings(a)
    assert f[0]["loss"] == "recompute" and f[0]["predicted_gain_ms"] is None and "configuration" in f[0]["gain_note"]
    # no finding without time in the partition
    st = a.steps
    step_ms = st["duration_ns"].sum() / st.height / 1e6
    assert all(x["ms_per_step"] >= 0.01 * step_ms for x in f)


def test_stalls_first_finding_is_the_host_outside_every_op():
    a = ta.analyze(ta.load(_trace("stalls")))
    f = findings(a)
    sleep_ms = 1e3 * _truth("stalls")["config"]["stall"]
    assert f[0]["loss"] == "idle_host_untraced" and abs(f[0]["ms_per_step"] - sleep_ms) <= 0.1 * sleep_ms
    assert 0.30 <= f[0]["share_of_step"] <= 0.36


def test_small_findings_put_the_profiler_first():
    # truth.json: the profiled steps are half as long again as the unprofiled ones
    res = run_cli("breakdown", _trace("small"), "-f", "json", "-q")
    f = json.loads(res.stdout)["findings"]
    assert f[0]["loss"] == "profiler" and "record_shapes" in f[0]["cause"]
    # without the profiler the host no longer starves the GPU for a tenth of the step: no dispatch finding
    assert not any(x["loss"] == "idle_host_ops" for x in f)


def test_report_carries_the_findings(tmp_path):
    out = tmp_path / "r.json"
    res = run_cli("report", _trace("recompute"), "-c", CFG, "-f", "json", "-o", out, "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["findings"][0]["loss"] == "recompute" and doc["findings"][0]["predicted_gain_ms"] > 0
    md = tmp_path / "r.md"
    assert run_cli("report", _trace("recompute"), "-c", CFG, "-f", "markdown", "-o", md, "-q").returncode == 0
    text = md.read_text()
    assert text.index("### Findings") < text.index("### Partition per rank")


def test_reconcile_says_when_the_configuration_contradicts_the_trace(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(CFG.read_text().replace('granularity = "full"', 'granularity = "none"').replace('gpu = "NVIDIA H200"', 'gpu = "H100 SXM"'))
    res = run_cli("reconcile", _trace("recompute"), "-c", cfg, "-q")
    assert res.returncode == 0, res.stderr
    err = " ".join(res.stderr.split())
    assert "the configuration has no recompute" in err and "15.9 % of the step" in err
    assert "but the trace ran on 'NVIDIA H200'" in err
    # the right configuration: no contradiction
    ok = run_cli("reconcile", _trace("recompute"), "-c", CFG, "-q")
    assert "the configuration has no recompute" not in ok.stderr and "but the trace ran on" not in ok.stderr
    assert pricing_configuration(tmp_path / "missing.toml") is None
