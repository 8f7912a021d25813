"""The report's kernels, causes and collective-efficiency sections; no zero rows, no "-0.0"."""

from __future__ import annotations

import polars as pl
import pytest

from traceanalyzer.baselines import read_nccl_tests
from traceanalyzer.api.tables import analysis_with_tables
from traceanalyzer.render import html, markdown
from traceanalyzer.render.sections import num, waterfall_table
from traceanalyzer.views import document

from conftest import DEMO, DLRM, FIXTURES

BASE = FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt"


@pytest.fixture(scope="module")
def dlrm():
    an = analysis_with_tables(DLRM)
    return an, document.build(an, generated_utc="2026-01-01T00:00:00Z", top=1000)


@pytest.fixture(scope="module")
def demo():
    an = analysis_with_tables(DEMO)
    return an, document.build(an, generated_utc="2026-01-01T00:00:00Z", baseline=read_nccl_tests(BASE))


def test_kernels_section_sums_to_the_buckets(dlrm):
    an, m = dlrm
    rows = m["kernels"]["rows"]
    got = {}
    for r in rows:
        got[r["bucket"]] = got.get(r["bucket"], 0.0) + r["bucket_ms"]
    want = {"compute": "compute_ns", "comm": "exposed_comm_ns", "other": "other_ns"}
    for b, col in want.items():
        assert got.get(b, 0.0) == pytest.approx(int(an.steps[col].sum()) / 1e6, abs=1e-9)
    assert sum(r["calls"] for r in rows) == int(an.kernel_stats["calls"].sum())


def test_causes_have_no_zero_rows_and_add_up(dlrm):
    an, m = dlrm
    c = m["causes"]
    n = an.steps.height
    idle = [r for r in c["idle"]]
    assert idle and all(r["ms"] > 0 for r in idle)
    assert sum(r["ms"] for r in idle) == pytest.approx(int(an.steps["idle_ns"].sum()) / n / 1e6, abs=1e-9)
    assert sum(r["pct_of_idle"] for r in idle) == pytest.approx(100.0)
    assert {r["cause"] for r in idle} == {"host_bound", "other", "sync"}  # bubble is zero here: no row
    dims = c["comm_by_dimension"]
    assert sum(r["exposed_ms"] for r in dims) == pytest.approx(int(an.steps["exposed_comm_ns"].sum()) / n / 1e6, abs=1e-9)
    assert [r["dimension"] for r in dims] == ["DP"] and dims[0]["wait_ms"] + dims[0]["transfer_ms"] == pytest.approx(dims[0]["kernel_ms"])
    # the straggler and the rank it waited on: as the cross-rank table says
    (s,) = c["stragglers"]
    cr = an.cross_rank.row(0, named=True)
    assert (s["step"], s["slowest_rank"], s["waited_on_rank"]) == (cr["step"], cr["slowest_rank"], cr["waited_on_rank"]) == (10, 1, 7)
    assert c["recomputed_ops"] == []  # no recompute in DLRM: no rows
    # no collective carries a byte count in these traces: no efficiency section
    assert m["collective_efficiency"] is None


def test_recomputed_ops_and_collective_efficiency_by_hand(demo):
    an, m = demo
    rc = m["causes"]["recomputed_ops"]
    assert rc[0]["name"] == "aten::conv2d" and all(r["gpu_ms"] > 0 for r in rc)
    ce = m["collective_efficiency"]
    assert ce["baseline"] is True
    ar = next(r for r in ce["rows"] if r["collective"] == "all_reduce")
    # by hand from the collective kernels: all-reduce bus factor 2(n-1)/n, total bytes over total time
    k = an.collectives.filter((pl.col("coll_type") == "all_reduce") & pl.col("bytes").is_not_null() & (pl.col("dur_ns") > 0))
    n = 8
    assert ar["count"] == k.height == 6 and ar["bytes"] == int(k["bytes"].sum())
    busbw = int(k["bytes"].sum()) * 2 * (n - 1) / n / int(k["dur_ns"].sum())  # B/ns = GB/s (one rank loaded: whole kernel time)
    assert ar["busbw_gbps"] == pytest.approx(busbw, rel=1e-12)
    base = read_nccl_tests(BASE)
    lo, hi = base["busbw_gbps"].min(), base["busbw_gbps"].max()
    assert lo <= ar["reference_gbps"] <= hi  # interpolated inside the measured curve
    assert 0 < ar["efficiency"] < 1
    sp = ce["exposed_split"]
    assert sp["wait_ms"] + sp["link_speed_ms"] + sp["below_reference_ms"] == pytest.approx(sp["exposed_ms"], abs=1e-9)
    broadcast = next(r for r in ce["rows"] if r["collective"] == "broadcast")
    assert broadcast["reference_gbps"] is None and "no broadcast in the baseline" in broadcast["reference"]


def test_renderers_show_the_new_sections(demo, tmp_path):
    _an, m = demo
    page = html.render(m)
    for h in ('id="kernels"', 'id="causes"', "Idle by cause", "Recomputed ops", 'id="collective-efficiency"'):
        assert h in page
    md = markdown.render(m, {})
    assert "### Collective efficiency" in md and "### Recomputed ops" in md and "-0.0" not in md


def test_no_negative_zero_and_no_zero_waterfall_rows():
    model = {"x": -0.00004, "y": -1.5, "waterfall": {
        "peak_tflops": 989.4, "achieved_tflops": 400.0, "convention": "6N",
        "terms": [{"key": "idle", "label": "idle", "tflops": 589.4}, {"key": "recompute", "label": "recompute", "tflops": -0.0}],
    }}
    assert num(model, "x", "{:.3f}").text == "0.000"
    assert num(model, "y", "{:.1f}").text == "-1.5"
    t = waterfall_table(model)
    assert [r[0].text for r in t.rows] == ["peak", "− idle", "= achieved"]


def test_report_baseline_option(tmp_path):
    from conftest import run_cli

    bad = tmp_path / "not-nccl.txt"
    bad.write_text("garbage\n")
    r = run_cli("report", str(DEMO), "-f", "json", "-q", "--baseline", str(bad))
    assert r.returncode == 4 and str(bad) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("report", str(DEMO), "-f", "json", "-q", "--baseline", str(BASE))
    import json

    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["collective_efficiency"]["baseline"] is True
    assert doc["reproduce"]["command"][-2:] == ["--baseline", str(BASE)]
