"""Self-consistency of tests/data/hta_reference.json (no HTA needed to run).

The JSON is produced by scripts/hta_reference.py under the HTA venv. These checks pin that
(1) HTA 0.5.0's numbers are reproduced exactly by the plain-Python re-implementation of its
rules (ladder rung r4), so every difference from our numbers is explained by the listed
rules, and (2) the hand-computed ("raw") numbers form a partition of the span.
"""

import json
from pathlib import Path

import pytest

REF = Path(__file__).parent / "data" / "hta_reference.json"
DATA = json.loads(REF.read_text())
FILES = [
    (job, fname, entry)
    for job, j in DATA["jobs"].items()
    for fname, entry in j["per_file"].items()
]


def test_versions_recorded():
    assert DATA["hta_version"] == "0.5.0"
    assert DATA["benchmark_largest"]["median_load_plus_temporal_s"] > 0


@pytest.mark.parametrize("job,fname,entry", FILES, ids=[f"{j}:{f}" for j, f, _ in FILES])
def test_hta_reproduced_exactly(job, fname, entry):
    hta = DATA["jobs"][job]["hta"]
    if "error" in hta:  # HTA crashed: our re-implementation must refuse the same trace
        assert "error" in entry["ladder"]["r4_hta_cut"]
        return
    assert entry["hta_reproduced_by_r4"]["exact"], entry["hta_reproduced_by_r4"]["mismatches"]


@pytest.mark.parametrize("job,fname,entry", FILES, ids=[f"{j}:{f}" for j, f, _ in FILES])
def test_raw_is_a_partition(job, fname, entry):
    raw = entry["raw"]
    if not isinstance(raw, dict) or "error" in raw:
        return
    assert raw["compute_ns"] + raw["exposed_comm_ns"] + raw["other_ns"] + raw["idle_ns"] == raw["span_ns"]
    assert raw["busy_ns"] + raw["idle_ns"] == raw["span_ns"]
    # rung r0 (our definitions, computed from HTA-style rows) agrees with the raw pass
    # (the ladder works on HTA-style float rows: equal to within float rounding, <= 1 ns per event)
    r0 = entry["ladder"]["r0_ours"]
    slack = 1 + 2 * (raw["n_kernels_compute"] + raw["n_kernels_comm"] + raw["n_memcpy_memset"])
    assert abs(r0["idle_time"] - raw["idle_ns"]) <= slack
    assert abs(r0["compute_time"] - raw["compute_ns"]) <= slack
    assert abs(r0["comm_under_compute"] - raw["comm_under_compute_ns"]) <= slack


@pytest.mark.parametrize("job,fname,entry", FILES, ids=[f"{j}:{f}" for j, f, _ in FILES])
def test_steps_tile(job, fname, entry):
    rs = entry.get("raw_steps")
    if not rs:
        return
    steps = rs["steps"]
    for a, b in zip(steps, steps[1:]):  # each step its ProfilerStep range: in order, never overlapping
        assert a["end_ns"] <= b["start_ns"]
    for s in steps:
        assert s["compute_ns"] + s["exposed_comm_ns"] + s["other_ns"] + s["idle_ns"] == s["span_ns"]
