"""compare's kernel diff: the kernels' contributions sum exactly to the bucket differences."""

from __future__ import annotations

import json
from fractions import Fraction

import polars as pl
import pytest

from traceanalyzer.api.tables import analysis_with_tables
from traceanalyzer.reconciliation import compare_time
from traceanalyzer.reconciliation.kerneldiff import bucket_gaps, kernel_diff

from conftest import DEMO, TRACES, needs_shared, run_cli

CONTROL = TRACES / "hta" / "trace_diff" / "control" / "control.json.gz"
TEST = TRACES / "hta" / "trace_diff" / "test" / "test.json.gz"


@needs_shared()
def test_kernel_diff_sums_to_bucket_differences_exactly():
    a, b = analysis_with_tables(CONTROL), analysis_with_tables(TEST)
    diff = kernel_diff(a, b)
    gaps = bucket_gaps(compare_time(a, b))
    assert diff["exact"] == {f"{k}_ns": v for k, v in gaps.items()}
    # independently: per bucket, mean bucket per step in B minus in A, from the breakdowns
    na, nb = a.steps.height, b.steps.height
    for bucket in ("compute", "recompute", "exposed_comm", "other"):
        want = Fraction(int(b.steps[f"{bucket}_ns"].sum()), nb) - Fraction(int(a.steps[f"{bucket}_ns"].sum()), na)
        assert diff["exact"][f"{bucket}_ns"] == want
    assert gaps["compute"] != 0 and gaps["other"] != 0  # the runs do differ
    # one row by hand: the DtoD memcpy, calls per mean step in A and B
    row = next(r for r in diff["rows"] if r["name"] == "Memcpy DtoD (Device -> Device)")
    calls = lambda an: int(an.kernel_stats.filter(pl.col("name") == "Memcpy DtoD (Device -> Device)")["calls"].sum())  # noqa: E731
    assert (row["calls_a"], row["calls_b"], row["status"]) == (calls(a) / na, calls(b) / nb, "changed")
    statuses = {r["status"] for r in diff["rows"]}
    assert {"appeared", "disappeared", "changed"} <= statuses
    assert sum(diff["counts"].values()) == len(diff["rows"])


@needs_shared()
def test_a_run_against_itself_changes_nothing():
    a = analysis_with_tables(DEMO)
    diff = kernel_diff(a, a)
    assert diff["counts"]["same"] == len(diff["rows"]) > 0
    assert all(v == 0 for v in diff["exact"].values())


@needs_shared()
def test_compare_cli_has_the_kernel_diff():
    r = run_cli("compare", str(CONTROL), str(TEST), "-f", "json", "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["comparison"]
    k = doc["kernels"]
    terms = {t["term"]: t["contribution_ms"] for t in doc["terms"]}
    comm = sum(v for t, v in terms.items() if t.startswith("exposed_comm"))
    assert k["by_bucket"]["compute"] == pytest.approx(terms["compute"], abs=1e-12)
    assert k["by_bucket"]["exposed_comm"] == pytest.approx(comm, abs=1e-9)
    assert sum(r["contribution_ms"] for r in k["rows"]) == pytest.approx(sum(k["by_bucket"].values()), abs=1e-9)
    r = run_cli("compare", str(CONTROL), str(TEST), "-q")
    assert "Kernels, B − A" in r.stdout
