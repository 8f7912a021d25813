"""Critical path: the longest-path solver against a plain-Python one, the path against HTA's
``critical_path_analysis`` on the same traces, and the path's own invariants.

HTA reference numbers (``HTA_*`` below) were obtained once, offline, with Holistic Trace
Analysis 0.5.0 (``TraceAnalysis(trace_dir=...).critical_path_analysis(rank, annotation,
instance_id)``, then ``cp_graph.get_critical_path_breakdown()`` summed by ``bound_by`` and by
edge ``type``; durations in µs as HTA reports them). HTA is not a test dependency.
"""

from __future__ import annotations

import json
import random

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceanalyzer.api import critical_path
from traceanalyzer.classify.critical_path import CP_BUCKETS, longest
from traceanalyzer.parsers import load

from conftest import DLRM, FIXTURES, TRACES, needs_shared, run_cli

ALEXNET = FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz"  # = HTA tests/data/critical_path/alexnet
ALEX_RANGE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
EVENT_SYNC = TRACES / "hta" / "critical_path" / "cuda_event_sync_multi_stream" / "event_sync_trace.json.gz"
NEG_QUEUE = TRACES / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"

# HTA on ALEXNET, annotation=ALEX_RANGE, instance_id=1 (the inner, second instance of the range;
# our step 1: the first instance encloses it and launches no GPU work of its own)
HTA_ALEX = {"total": 35834, "cpu_bound": 32042, "gpu_compute_bound": 3712, "kernel_kernel": 50, "launch": 30}
# HTA on EVENT_SYNC, annotation="" (the whole trace; ours: step_name=None)
HTA_EVENT_SYNC = {"total": 1178, "cpu_bound": 1025, "gpu_compute_bound": 124, "kernel_kernel": 15, "launch": 14}
# HTA on NEG_QUEUE, annotation="ProfilerStep", instance_id=1 (ProfilerStep#551)
HTA_NEG_QUEUE = {"total": 215565, "gpu_compute_bound": 27008, "kernel_kernel": 188557}


def _by_what(cp, step=None) -> dict[str, int]:
    seg = cp.segments if step is None else cp.segments.filter(pl.col("step") == step)
    return dict(seg.group_by("what").agg(pl.col("dur_ns").sum()).rows())


# ---- the solver against a plain-Python longest path ----------------------------------------

def _plain_longest(n, chain, t, w, src, dst, cw):
    """Longest path ending at each node, by relaxing edges in time order (all edges go forwards
    in time; ties are walked in chain order, which the chain edges respect)."""
    incoming = {i: [] for i in range(n)}
    for i in range(1, n):
        if chain[i] == chain[i - 1]:
            incoming[i].append((i - 1, w[i]))
    for s, d, x in zip(src, dst, cw):
        incoming[d].append((s, x))
    order = sorted(range(n), key=lambda i: (t[i], i))
    dist = [None] * n
    for _ in range(n):  # repeat until stable: simple and obviously right for tiny graphs
        changed = False
        for v in order:
            best = 0
            for u, x in incoming[v]:
                if dist[u] is not None:
                    best = max(best, dist[u] + x)
            if dist[v] != best:
                dist[v], changed = best, True
        if not changed:
            break
    return dist


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_solver_equals_plain_python(seed):
    rnd = random.Random(seed)
    chains, ts, ws = [], [], []
    for c in range(rnd.randint(1, 5)):
        t = 0
        for k in range(rnd.randint(1, 12)):
            step = rnd.randint(0, 9)
            t += step
            chains.append(c)
            ts.append(t)
            ws.append(0 if k == 0 else rnd.randint(0, step))  # a chain edge weighs at most its time
    n = len(chains)
    src, dst, cw = [], [], []
    for _ in range(rnd.randint(0, 3 * n)):
        a, b = rnd.randrange(n), rnd.randrange(n)
        if (ts[a], chains[a]) < (ts[b], chains[b]) and chains[a] != chains[b]:  # forwards in (time, chain)
            src.append(a), dst.append(b), cw.append(rnd.randint(0, ts[b] - ts[a]))
    arr = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    sol = longest.solve(arr(chains), arr(ws), arr(src), arr(dst), arr(cw))
    assert sol.dist.tolist() == _plain_longest(n, chains, ts, ws, src, dst, cw)
    # the path read back weighs its distance
    end = int(np.argmax(sol.dist))
    pieces, edges = longest.trace_back(sol, arr(src), end)
    weight = sum(sum(ws[k] for k in range(j + 1, i + 1)) for j, i in pieces) + sum(cw[e] for e in edges)
    assert weight == sol.dist[end]


# ---- against HTA -----------------------------------------------------------------------------

def test_alexnet_step_matches_hta():
    cp = critical_path(ALEXNET, step_range=ALEX_RANGE, host_gaps=False)  # as HTA: only ops weigh host time
    row = cp.summary.row(0, named=True)
    assert (row["step"], row["rank"]) == (1, 0)
    what = _by_what(cp)
    # HTA's weights are integer µs from float timestamps; ours are ns: pieces agree to the µs
    assert what["host_op"] == HTA_ALEX["cpu_bound"] * 1000
    assert what["kernel"] == HTA_ALEX["gpu_compute_bound"] * 1000  # HTA counts memset as compute
    assert what["kernel_gap"] == HTA_ALEX["kernel_kernel"] * 1000
    assert what["launch_delay"] == HTA_ALEX["launch"] * 1000
    # the one extra µs: an inferred wait between streams where HTA has a weightless sync edge
    assert what.get("wait_gap", 0) == 1000
    assert row["path_ns"] == HTA_ALEX["total"] * 1000 + 1000
    assert row["host_ns"] == what["host_op"] and row["idle_ns"] == 81000


@needs_shared()
def test_event_sync_trace_matches_hta_exactly():
    cp = critical_path(EVENT_SYNC, step_range=None, host_gaps=False)  # as HTA
    row = cp.summary.row(0, named=True)
    what = _by_what(cp)
    assert row["path_ns"] == HTA_EVENT_SYNC["total"] * 1000
    assert what == {
        "host_op": HTA_EVENT_SYNC["cpu_bound"] * 1000,
        "kernel": HTA_EVENT_SYNC["gpu_compute_bound"] * 1000,
        "kernel_gap": HTA_EVENT_SYNC["kernel_kernel"] * 1000,
        "launch_delay": HTA_EVENT_SYNC["launch"] * 1000,
    }
    assert row["syncs"] == 1  # cudaDeviceSynchronize waits for the last kernel


@needs_shared()
def test_idle_dominated_step_has_hta_length():
    """ProfilerStep#551: the GPU waits most of the step and no CUDA synchronisation event says
    on what; without inferred waits (HTA has none here) the path's length is HTA's within 0.2 %
    (the graphs differ at the window edges: see docs/validation.md), and idle dominates both.
    HTA weighs no host time outside ops: compared with host_gaps=False, as HTA. HTA's step holds
    the kernels its ops launched, ours the GPU activity inside the step's host range: the host runs
    ahead here, so the last kernels the step launched start after its range (0.3 % of the path)."""
    cp = critical_path(NEG_QUEUE, step=551, infer_waits=False, host_gaps=False)
    row = cp.summary.row(0, named=True)
    assert abs(row["path_ns"] - HTA_NEG_QUEUE["total"] * 1000) <= 0.004 * HTA_NEG_QUEUE["total"] * 1000
    assert row["idle_share"] > 0.8 and HTA_NEG_QUEUE["kernel_kernel"] / HTA_NEG_QUEUE["total"] > 0.8
    assert row["host_ns"] == 0


# ---- invariants, several ranks -----------------------------------------------------------

@pytest.fixture(scope="module")
def dlrm():
    return load(DLRM)


def _check_invariants(cp):
    s = cp.summary
    total = pl.sum_horizontal([pl.col(f"{b}_ns") for b in CP_BUCKETS])
    assert s.filter(total != pl.col("path_ns")).height == 0
    assert s.filter(pl.col("path_ns") > pl.col("window_ns")).height == 0
    per = cp.segments.group_by("step").agg(pl.col("dur_ns").sum())
    assert dict(per.rows()) == dict(s.select("step", "path_ns").group_by("step").agg(pl.col("path_ns").sum()).rows())
    seg = cp.segments.sort("step", "seq")
    # the path walks forwards in time: no piece starts before the previous one ended
    gap = seg.with_columns((pl.col("start_ns") - pl.col("end_ns").shift(1).over("step")).alias("g"))
    assert gap.filter(pl.col("g") < 0).height == 0
    assert (seg["dur_ns"] > 0).all() and (seg["dur_ns"] <= seg["end_ns"] - seg["start_ns"]).all()


def test_joint_path_crosses_ranks_through_a_collective(dlrm):
    from traceanalyzer.api import analyze

    a = analyze(dlrm)
    # ops only (as HTA): with host gaps weighed, this host-bound job's path stays on one host thread
    cp = critical_path(a, host_gaps=False)
    _check_invariants(cp)
    row = cp.summary.row(0, named=True)
    assert row["rank"] is None and row["ranks"] == 2 and row["collectives"] == 1
    # the collective piece moves data from the moment its last rank arrived (independent of the
    # path: the matched instance's latest start over all ranks)
    t = cp.segments.filter(pl.col("what") == "transfer").row(0, named=True)
    inst = a.collectives.filter((pl.col("rank") == t["rank"]) & (pl.col("end_ns") == t["end_ns"])).row(0, named=True)
    peers = a.collectives.filter((pl.col("pg_name") == inst["pg_name"]) & (pl.col("instance") == inst["instance"]))
    assert t["start_ns"] == peers["start_ns"].max() > inst["start_ns"]
    # the path arrives on the transfer's rank from the last arriver's rank
    last = peers.sort("start_ns").row(-1, named=True)["rank"]
    assert set(cp.segments["rank"].unique().to_list()) == {last, t["rank"]}
    # here from rank 4 to rank 2: a collective edge joins two equal instants and must survive
    # towards a lower rank as well
    assert (last, t["rank"]) == (4, 2)


def test_rank_workers_give_the_same_path(dlrm):
    """Files parsed and classified by rank worker processes (their events kept) give the same
    path as the trace loaded and classified in this process, and so does the command."""
    here = critical_path(dlrm)
    pooled = critical_path(DLRM, workers=2)
    assert pooled.summary.equals(here.summary) and pooled.segments.equals(here.segments)
    r = run_cli("critical-path", DLRM, "-q", "-f", "csv", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert pl.read_csv(r.stdout.encode())["dur_ns"].to_list() == here.segments["dur_ns"].to_list()


def test_one_rank_counts_its_collective_waits(dlrm):
    cp = critical_path(dlrm, rank=3)
    _check_invariants(cp)
    row = cp.summary.row(0, named=True)
    assert row["rank"] == 3 and row["ranks"] == 1 and row["collectives"] == 0
    # alone, a rank cannot see who it waited for: the whole collective kernel is on its path
    big = cp.segments.sort("dur_ns", descending=True).row(0, named=True)
    assert big["bucket"] == "exposed_comm" and big["what"] == "kernel"
    k = dlrm.events.filter((pl.col("rank") == 3) & (pl.col("start_ns") == big["start_ns"]) & (pl.col("kind") == "kernel")).row(0, named=True)
    assert big["dur_ns"] == k["end_ns"] - k["start_ns"]


def test_several_steps_each_their_own_path():
    """Three steps of one rank: each summary row is the sum of its own step's pieces, and each
    step's path is the one computed for that step alone."""
    from conftest import DEMO

    tr = load(DEMO)
    cp = critical_path(tr)
    _check_invariants(cp)
    assert cp.summary["step"].to_list() == [15, 16, 17]
    for step in (15, 17):
        alone = critical_path(tr, step=step)
        assert alone.summary.row(0) == cp.summary.filter(pl.col("step") == step).row(0)[:-1] + (alone.summary["rounds"][0],)
        assert alone.segments.equals(cp.segments.filter(pl.col("step") == step))


def test_host_gaps_make_the_step_range_visible():
    off = critical_path(ALEXNET, step_range=ALEX_RANGE, host_gaps=False)
    on = critical_path(ALEXNET, step_range=ALEX_RANGE)  # the default
    _check_invariants(on)
    gaps = _by_what(on).get("host_gap", 0)
    assert "host_gap" not in _by_what(off) and gaps > 0
    assert on.summary["path_ns"][0] >= off.summary["path_ns"][0]
    named = on.segments.filter(pl.col("what") == "host_gap")["name"].unique().to_list()
    assert ALEX_RANGE in named


def test_unknown_step_or_rank_is_a_value_error(dlrm):
    with pytest.raises(ValueError, match=r"no step 99 .*steps: 10"):
        critical_path(dlrm, step=99)
    with pytest.raises(ValueError, match=r"no rank 42 .*ranks: 0, 1"):
        critical_path(dlrm, rank=42)


# ---- command line ------------------------------------------------------------------------

def test_cli_formats_agree(tmp_path):
    out = tmp_path / "cp.json"
    r = run_cli("critical-path", DLRM, "-q", "-f", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"][0]["path_ns"] == sum(s["dur_ns"] for s in doc["segments"])
    r = run_cli("critical-path", DLRM, "-q", "-f", "csv", "--rank", "3")
    assert r.returncode == 0, r.stderr
    csv = pl.read_csv(r.stdout.encode())
    assert csv["dur_ns"].sum() == critical_path(load(DLRM), rank=3).summary["path_ns"][0]
    r = run_cli("critical-path", ALEXNET, "-q", "--step-range", ALEX_RANGE, "--top", "3", "--no-host-gaps")
    assert r.returncode == 0 and "35.835" in r.stdout and "cudaMalloc" in r.stdout


def test_cli_bad_step_is_a_usage_error():
    r = run_cli("critical-path", DLRM, "-q", "--step", "99")
    assert r.returncode == 2 and "no step 99" in r.stderr and "Traceback" not in r.stderr


def test_cli_refuses_to_overwrite_its_input_and_cpu_only_traces(tmp_path):
    copy = tmp_path / "t.json.gz"
    copy.write_bytes(ALEXNET.read_bytes())
    r = run_cli("critical-path", copy, "-q", "-o", copy)
    assert r.returncode == 3 and "refusing to overwrite an input" in r.stderr
    assert copy.read_bytes() == ALEXNET.read_bytes()
    r = run_cli("critical-path", FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz", "-q")
    assert r.returncode == 5 and r.stderr.count("\n") == 1
