"""`compare` without a configuration: the step-time gap split exactly into bucket differences.

Checked on the real 2×H100 before/after Nsight exports against the per-device numbers derived
with plain SQL in tests/test_nsys.py (compute ns per device: before 253,690,832 / 256,095,624,
after 227,484,352 / 227,608,953; idle before 26,031,025 / 31,385,635, after 59,142,466 /
45,268,668).
"""

from __future__ import annotations

from fractions import Fraction

import orjson
import pytest

import traceanalyzer as ta
from traceanalyzer.reconciliation import compare_time

from conftest import TRACES, needs_shared, run_cli

NSYS = TRACES / "nsys"


@needs_shared()
def test_compare_before_after_nsys_splits_the_gap_exactly():
    a = ta.analyze(ta.load(NSYS / "nsys-ai__mfu_2gpu_before.sqlite"))
    b = ta.analyze(ta.load(NSYS / "nsys-ai__mfu_2gpu_after.sqlite"))
    cmp = compare_time(a, b)
    ex = cmp["exact"]
    assert sum(v for k, v in ex.items() if k != "gap_ns") == ex["gap_ns"]
    assert ex["compute_ns"] == Fraction(227_484_352 + 227_608_953, 2) - Fraction(253_690_832 + 256_095_624, 2)
    idle = sum(v for k, v in ex.items() if k.startswith("idle_"))  # idle is split by cause
    assert idle == Fraction(59_142_466 + 45_268_668, 2) - Fraction(26_031_025 + 31_385_635, 2)
    assert cmp["terms"][0]["term"] == "compute"  # the biggest mover comes first


@needs_shared()
def test_compare_cli_without_config_prints_json():
    r = run_cli("compare", NSYS / "nsys-ai__mfu_2gpu_before.sqlite", NSYS / "nsys-ai__mfu_2gpu_after.sqlite", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)["comparison"]
    assert doc["sum_contributions_ms"] == pytest.approx(doc["gap_ms"], abs=1e-9)
    assert doc["step_ms_a"] == pytest.approx((299_848_812 + 298_661_551) / 2 / 1e6)
