"""Our whole-trace breakdown against the independent counts of tests/data/hta_reference.json.

That file (scripts/hta_reference.py, run once under HTA 0.5.0) holds, per real trace, a
plain-Python count of the whole trace written from docs/validation.md without the package's
code (``raw``: every kernel, memcpy and memset; no step cut; integer ns; communication = a kernel
whose name starts with nccl/rccl or launched under ``record_param_comms``). Here the package
runs on the same trace, analysed whole (``step_range=None``), and must give the same five
buckets to the nanosecond. Per step: test_vs_hta.py.

One documented difference: the B200 trace runs PyTorch's symmetric-memory all-reduce
(``multimem_all_reduce_kernel``), communication by our library table (docs/validation.md) and
compute by the nccl/rccl-name rule of the reference: there the kernels' summed time, counted here
from the raw JSON, moves from compute to exposed comm (none of it runs under compute).
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import NoGpuActivity

from conftest import TRACES, shared_or_skip

REF = json.loads((Path(__file__).parent / "data" / "hta_reference.json").read_text())
FILES = [
    pytest.param(job, entry["raw"], id=job.rsplit("/", 1)[-1][:40])
    for job, j in REF["jobs"].items() if not job.endswith("(folder as one job)")
    for entry in j["per_file"].values()
]
#: kernels that the reference's name rule calls compute and our library table communication
SYMMETRIC_MEMORY = "multimem_all_reduce_kernel"


def _summed_ns(path: Path, needle: str) -> int:
    """Plain Python over the raw JSON: the summed duration (ns) of the kernels whose name
    contains ``needle``."""
    doc = orjson.loads(gzip.open(path).read())
    return sum(int(Decimal(str(e["dur"])) * 1000) for e in doc["traceEvents"]
               if e.get("ph") == "X" and e.get("cat") == "kernel" and needle in e.get("name", ""))


@pytest.mark.parametrize("job,raw", shared_or_skip(FILES))
def test_whole_trace_equals_the_independent_count(job, raw):
    if "error" in raw:  # the reference found no GPU work: we refuse the trace with a clear error
        assert raw["error"] == "no GPU kernel/memcpy/memset events"
        with pytest.raises(NoGpuActivity):
            ta.breakdown(ta.load(TRACES / job), step_range=None)
        return
    got = ta.breakdown(ta.load(TRACES / job), step_range=None)
    assert got.height == 1
    row = got.row(0, named=True)
    moved = _summed_ns(TRACES / job, SYMMETRIC_MEMORY)
    assert (moved > 0) == ("b200" in job)  # only the B200 trace runs symmetric-memory kernels
    assert row["duration_ns"] == raw["span_ns"]
    assert row["idle_ns"] == raw["idle_ns"]
    assert row["other_ns"] == raw["other_ns"]
    assert row["compute_ns"] + row["recompute_ns"] == raw["compute_ns"] - moved
    assert row["exposed_comm_ns"] == raw["exposed_comm_ns"] + moved
    assert row["overlapped_comm_ns"] == raw["comm_under_compute_ns"]
    # the kernels the reference counts as communication, ours too
    if not moved:
        assert row["exposed_comm_ns"] + row["overlapped_comm_ns"] == raw["comm_ns"]

