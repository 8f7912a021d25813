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
