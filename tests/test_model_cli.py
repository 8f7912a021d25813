"""CLI: predict / reconcile / compare (run as a user would)."""

from __future__ import annotations

import orjson
import pytest

from conftest import ROOT, run_cli

EX = ROOT / "docs" / "examples"


def test_predict_json_and_vs():
    r = run_cli("predict", "--config", EX / "issue1031-70b.toml", "--vs", EX / "megatron-readme-70b.toml", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["vs"]["tflops_per_gpu"] == pytest.approx(419.7)
    c = doc["comparison"]
    assert sum(c["causes"].values()) == pytest.approx(c["predicted_gap"], abs=1e-9)
    assert c["reported_gap"] == pytest.approx(296.5 - 419.7)
    assert doc["prediction"]["convention"] == "megatron2024"


def test_predict_markdown_sweep_and_errors(tmp_path):
    r = run_cli("predict", "--config", EX / "issue1031-70b.toml", "--vs", EX / "megatron-readme-70b.toml",
                "--global-batch", "64", "--global-batch", "256", "--format", "markdown")
    assert r.returncode == 0, r.stderr
    assert "| 64 | 32 | 0.219 |" in r.stdout and "| 256 | 128 | 0.055 |" in r.stdout
    r = run_cli("predict", "--config", EX / "megatron-readme-70b.toml")
    assert r.returncode == 0 and "419.7" in r.stdout and "megatron2024" in r.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nlayers = 2\n")
    r = run_cli("predict", "--config", bad)
    assert r.returncode == 7 and "is missing" in r.stderr and "needed for" in r.stderr


from conftest import TRACES  # noqa: E402
needs_shared = pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")


@needs_shared
def test_reconcile_and_compare_cli():
    mi = TRACES / "kineto-public/tracelens-amd/mi300x_resnet_act_checkpoint_rank0.json.gz"
    cfg = EX / "traces" / "mi300x-resnet18-ckpt.toml"
    r = run_cli("reconcile", mi, "--config", cfg, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["sum_tflops"] == pytest.approx(1307.4, rel=1e-12)
    assert doc["gemm_check"]["ok"] and "exact" not in doc
    r = run_cli("compare", mi, mi, "--config", cfg, "--format", "markdown")
    assert r.returncode == 0, r.stderr
    assert "= gap (sum of contributions) |  |  | +0.00 |" in r.stdout
    # a config for one trace only is an error; none at all compares in time (tests/test_compare_time.py)
    r = run_cli("compare", mi, mi, "--config-a", cfg)
    assert r.returncode == 7 and "--config" in r.stderr
