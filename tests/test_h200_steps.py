"""Every step whole, and host-bound idle by cause, on the real H200 traces (``truth.json``
beside each; recorded by the folder's ``capture.py``).

Expected values come from the trace JSON itself (the ``ProfilerStep#N`` ranges read here with
plain Python) and from ``truth.json`` (the 40 ms ``time.sleep`` of ``stalls`` after each step)."""

from __future__ import annotations

import gzip
import json
import re

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import HOST_FIELDS
from traceanalyzer.errors import NoGpuActivity

from conftest import TRACES, real_gpu_traces

H200 = TRACES / "h200"
VARIANTS = ["base", "recompute", "stalls", "small", "compiled", "b4"]
needs_h200 = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _trace(name: str):
    return H200 / name / "rank0.pt.trace.json.gz"


def _profiler_steps(path) -> dict[int, tuple[int, int]]:
    """step -> (start_ns, end_ns) of the host ``ProfilerStep#N`` ranges, straight from the JSON."""
    doc = json.loads(gzip.open(path).read())
    base = int(doc.get("baseTimeNanoseconds") or 0)
    out = {}
    for e in doc["traceEvents"]:
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))
        if m and e.get("ph") == "X" and e.get("cat") == "user_annotation":
            s = base + round(e["ts"] * 1000)
            out[int(m.group(1))] = (s, s + round(e["dur"] * 1000))
    return out


@pytest.fixture(scope="module")
def analyses():
    if not H200.exists():
        pytest.skip(f"H200 traces not found at {H200}")
    return {v: ta.analyze(ta.load(_trace(v))) for v in VARIANTS}


@needs_h200
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_step_is_its_profiler_step_range(analyses, variant):
    want = _profiler_steps(_trace(variant))
    got = analyses[variant].steps.sort("step")
    assert got["step"].to_list() == sorted(want)  # every step, the last included
    for step, start, dur in got.select("step", "start_ns", "duration_ns").rows():
        s0, s1 = want[step]
        assert abs(start - s0) <= 1000 and abs(dur - (s1 - s0)) <= 1000


@needs_h200
def test_stalls_idle_share_is_that_of_the_whole_steps(analyses):
    st = analyses["stalls"].steps
    share = st["idle_ns"].sum() / st["duration_ns"].sum()
    assert 0.35 <= share <= 0.36


@needs_h200
def test_stalls_sleep_is_host_bound_untraced(analyses):
    sleep_ns = json.loads((H200 / "stalls" / "truth.json").read_text())["config"]["stall"] * 1e9
    st = analyses["stalls"].steps
    assert st.height == 3
    for v in st["idle_host_untraced_ns"].to_list():
        assert abs(v - sleep_ns) <= 0.10 * sleep_ns
    # no DataLoader or optimizer range is open while the GPU waits: the sleep comes after both
    assert st["idle_host_dataloader_ns"].sum() == 0


def _all_real():
    out = [_trace(v) for v in VARIANTS] if H200.exists() else []
    out += [p for p in real_gpu_traces() if "cupti_profiler" not in str(p)]
    if TRACES.exists():
        out += sorted((TRACES / "nsys").glob("*.sqlite"))
    return out


@pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")
@pytest.mark.parametrize("path", _all_real(), ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_host_causes_sum_exactly_to_host_bound(path):
    try:
        st = ta.analyze(ta.load(path)).steps
    except NoGpuActivity:
        pytest.skip("no GPU activity")
    total = st.select(pl.sum_horizontal([f"{f}_ns" for f in HOST_FIELDS])).to_series()
    assert (total == st["idle_host_bound_ns"]).all()
    assert all((st[f"{f}_ns"] >= 0).all() for f in HOST_FIELDS)


SAXPY = TRACES / "nsys" / "pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


@pytest.mark.skipif(not SAXPY.exists(), reason=f"nsys trace not found at {SAXPY}")
def test_nsys_nvtx_step_ranges_are_the_steps():
    """An Nsight Systems trace with --step-range saxpy: each step is one NVTX 'saxpy' range, read
    here from the SQLite export's NVTX_EVENTS table (start, end in ns)."""
    import sqlite3

    con = sqlite3.connect(f"file:{SAXPY}?mode=ro", uri=True)
    rows = con.execute("SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.textId = s.id "
                       "WHERE coalesce(n.text, s.value) = 'saxpy' ORDER BY n.start").fetchall()
    con.close()
    st = ta.analyze(ta.load(SAXPY), "saxpy").steps.sort("start_ns")
    assert len(rows) == 5
    assert st.select("start_ns", "duration_ns").rows() == [(s, e - s) for s, e in rows]
