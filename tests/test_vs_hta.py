"""Our breakdown against the reference numbers in tests/data/hta_reference.json.

That file (scripts/hta_reference.py, run under HTA 0.5.0) holds, per real trace, HTA's own
temporal breakdown and overlap, and an independent plain-Python count of our definitions
("raw_steps", written from docs/validation.md without our code). We pin:

* every step of every real trace equals the independent count to the nanosecond (each step its
  ProfilerStep range, read again here from the trace's JSON by the plain-Python reference);
* where HTA's definitions coincide with ours (single-step traces analysed whole, no sync
  records, no fractional timestamps: the 8 DLRM ranks), HTA's idle, compute and non-compute
  equal ours to the µs, and its overlap % equals ours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import traceanalyzer as ta

from conftest import TRACES, needs_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import hta_reference  # noqa: E402  (plain Python, standard library only)

REF = json.loads((Path(__file__).parent / "data" / "hta_reference.json").read_text())


def _single_files():
    out = []
    for job, j in REF["jobs"].items():
        if job.endswith("(folder as one job)"):
            continue
        for entry in j["per_file"].values():
            rs = entry.get("raw_steps")
            if rs and rs.get("steps"):
                out.append((job, rs["steps"]))
    return out


@needs_shared()
@pytest.mark.parametrize("job,steps", _single_files(), ids=[j for j, _ in _single_files()])
def test_every_step_equals_the_independent_count(job, steps):
    # the stored reference is what the plain-Python pass reads from the trace's JSON now
    assert hta_reference.raw_steps(hta_reference.load_json(TRACES / job))["steps"] == steps
    got = ta.breakdown(ta.load(TRACES / job)).sort("start_ns")
    assert got.height == len(steps)
    for row, ref in zip(got.iter_rows(named=True), steps):
        assert row["start_ns"] == ref["start_ns"]
        assert row["duration_ns"] == ref["span_ns"]
        for b in ["idle", "compute", "exposed_comm", "overlapped_comm", "other"]:
            mine = row[f"{b}_ns"] + (row["recompute_ns"] if b == "compute" else 0)
            assert mine == ref[f"{b}_ns"], b


@needs_shared()
@pytest.mark.parametrize("rank", range(8))
def test_dlrm_agrees_with_hta_where_definitions_coincide(rank):
    job = next(j for j in REF["jobs"] if f"param-dlrm-v100-8rank/worker{rank}_" in j)
    hta = REF["jobs"][job]["hta"]["ranks"][str(rank)]
    # HTA takes a single-step trace whole (GPU work launched before the step included): so do we
    row = ta.breakdown(ta.load(TRACES / job), step_range=None).row(0, named=True)
    assert row["idle_us"] == hta["idle_time(us)"]
    assert row["compute_us"] == hta["compute_time(us)"]
    assert row["duration_us"] == hta["kernel_time(us)"]
    # HTA "non-compute" = exposed comm + memcpy/memset alone
    assert row["exposed_comm_us"] + row["other_us"] == hta["non_compute_time(us)"]
    comm = row["exposed_comm_us"] + row["overlapped_comm_us"]
    assert round(100 * row["overlapped_comm_us"] / comm, 2) == hta["comp_comm_overlap_pctg"]
