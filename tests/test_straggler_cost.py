"""The cross-rank replay and the straggler what-if.

* The replay of the unchanged job gives back every rank's measured step (every rank, every step)
  on the 8-rank DLRM job and on the nsys 2-GPU job (the measured durations are the steps' own
  windows, read from the trace by the partition).
* Hand-built 4-rank traces with a known straggler (times in whole µs): every rank computes
  ``C`` µs then enters an all-reduce; the straggler computes ``C + D``; the others' all-reduce
  kernels are longer by exactly their wait ``D``, every kernel ends at the same time. The
  what-if must give ``D`` for the straggler's compute before the all-reduce and zero elsewhere;
  the straggler made each of the three others wait ``D`` per step.
* Ties, a missing rank, a rank with no collective and mismatched collective counts each warn and
  give the documented answer.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

import traceanalyzer as ta

from conftest import DLRM, TRACES

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
C, T, D = 400, 50, 120  # compute, transfer, the straggler's extra compute (µs)
STEP = 1000


def _rank_file(tmp_path, rank: int, world: int, extra: int, steps: int = 2, collectives: int | None = None,
               nelems: int | None = None, late: int = 0) -> None:
    """One rank of the job: ``steps`` ProfilerStep host ranges of 1000 µs; in each, a compute
    kernel of ``C + extra`` µs from 10 µs, then an all-reduce that ends at 10 + C + max extra + T
    (``collectives``: only that many all-reduces in all, to break the matching; None: one per step).
    ``late``: the compute kernel starts that much later (the GPU idles, waiting for the host) and
    lasts ``C`` µs; the all-reduce follows it."""
    ev, corr = [], 0
    worst = D
    for s in range(steps):
        base = s * STEP
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "ts": base, "dur": STEP, "pid": 1, "tid": 1,
                   "args": {"External id": 1000 + s}})
        kernels = [("sm90_gemm", base + 10 + late, C + extra)]
        if collectives is None or s < collectives:
            arrive = base + 10 + late + C + extra
            kernels.append(("ncclKernel_AllReduce_RING_LL_Sum_float", arrive, base + 10 + C + worst + T - arrive))
        for name, ts, dur in kernels:
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": base + 1 + corr % 5, "dur": 1, "pid": 1, "tid": 1,
                       "args": {"correlation": corr, "External id": corr}})
            args = {"correlation": corr, "External id": corr, "stream": 7, "device": 0}
            if nelems is not None and name.startswith("nccl"):
                args.update({"In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float", "Group size": world})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": args})
    doc = {"traceEvents": ev, "deviceProperties": H100, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}}
    (tmp_path / f"rank{rank}.json").write_text(json.dumps(doc))


def _job(tmp_path, extras: dict[int, int], world: int = 4):
    for r, extra in extras.items():
        _rank_file(tmp_path, r, world, extra)
    return ta.straggler_view(tmp_path)


def _cost(costs: pl.DataFrame, rank: int, phase: str, coll: str | None = "all_reduce") -> float:
    sel = costs.filter(pl.col("rank") == rank, pl.col("phase") == phase)
    sel = sel.filter(pl.col("collective").is_null()) if coll is None else sel.filter(pl.col("collective") == coll)
    return sel.get_column("cost_ms_per_step").item()


def test_the_replay_gives_back_every_rank_and_step_of_the_dlrm_job():
    a = ta.analyze(DLRM)
    r = ta.replay(a)
    # the steps' windows, from the analysis' step table (the ProfilerStep ranges of each rank)
    assert r.height == a.steps.height == 8
    for row in r.iter_rows(named=True):
        assert abs(row["replayed_ms"] - row["measured_ms"]) <= 0.01 * row["measured_ms"]
    # by hand from the raw JSON: rank 1's ProfilerStep#10 is 19.901 ms, rank 7's 12.509 ms
    assert dict(zip(r["rank"].to_list(), r["measured_ms"].to_list()))[1] == pytest.approx(19.901)
    assert r.filter(rank=7)["replayed_ms"].item() == pytest.approx(12.509)


@pytest.mark.parametrize("path", [
    "fixtures/nsys/mfu_2gpu_before_cut.sqlite",
    "shared:nsys/nsys-ai__mfu_2gpu_before.sqlite",
    "shared:kineto-public/param-dlrm-v100-8rank",
])
def test_the_replay_gives_back_the_measured_steps_of_the_nsys_and_shared_jobs(path):
    from conftest import ROOT

    p = TRACES / path.split(":", 1)[1] if path.startswith("shared:") else ROOT / path
    if not p.exists():
        pytest.skip(f"{p} not present")
    r = ta.replay(p)
    assert r.height >= 2 and r["replayed_ms"].null_count() == 0
    rel = ((r["replayed_ms"] - r["measured_ms"]).abs() / r["measured_ms"]).max()
    assert rel <= 0.01


def test_dlrm_top_straggler_is_rank_7_and_it_made_the_others_wait():
    v = ta.straggler_view(DLRM)
    top = v.costs.row(0, named=True)
    assert (top["rank"], top["collective"]) == (7, "all_to_all")
    assert top["cost_ms_per_step"] > 0.5
    assert v.ranks.filter(role="made others wait")["rank"].to_list()[0] == 7
    # the slow-step ranks of the step rule are the ones that waited
    waited = set(v.ranks.filter(role="waited")["rank"].to_list())
    assert {1, 3}.issubset(waited)
    # rank 7 arrived last at the first all-to-all: by hand (test_comm), rank 0 waited 2135 µs on it
    m = v.wait_matrix
    assert m.filter(collective="all_to_all", rank=0, on_rank=7)["wait_ms_per_step"].item() >= 2.135


def test_a_known_straggler_costs_its_extra_compute_and_nothing_else(tmp_path):
    v = _job(tmp_path, {0: 0, 1: 0, 2: D, 3: 0})
    costs = v.costs
    assert _cost(costs, 2, "compute") == pytest.approx(D / 1000, abs=1e-9)
    others = costs.filter(~((pl.col("rank") == 2) & (pl.col("phase") == "compute") & (pl.col("collective") == "all_reduce")))
    assert others["cost_ms_per_step"].abs().max() <= 1e-9
    row = costs.row(0, named=True)
    assert (row["rank"], row["phase"], row["collective"]) == (2, "compute", "all_reduce")
    # rank 2 made three ranks wait D per step; each of them waited D
    assert row["made_wait_ms_per_step"] == pytest.approx(3 * D / 1000)
    assert row["waited_ms_per_step"] == pytest.approx(0.0)
    assert _cost(costs, 0, "compute") == 0.0
    ranks = v.ranks
    assert ranks.filter(role="made others wait")["rank"].to_list() == [2]
    assert sorted(ranks.filter(role="waited")["rank"].to_list()) == [0, 1, 3]
    w = v.wait_matrix.filter(on_rank=2)
    assert sorted(w["rank"].to_list()) == [0, 1, 3] and w["wait_ms_per_step"].to_list() == pytest.approx([D / 1000] * 3)
    assert v.total_cost_ms_per_step == pytest.approx(D / 1000)
    # and the replay of the unchanged job is the measured one
    assert (v.replay["replayed_ms"] - v.replay["measured_ms"]).abs().max() < 1e-9
    assert v.warnings == []
    # the second step alone gives the same answer (its first collective's anchor keeps its end)
    one = ta.straggler_view(ta.select(ta.analyze(tmp_path), steps=[2]))
    assert one.replay["step"].unique().to_list() == [2] and (one.replay["replayed_ms"] - one.replay["measured_ms"]).abs().max() < 1e-9
    assert one.costs.row(0)[:3] == (2, "compute", "all_reduce") and one.costs.row(0)[4] == pytest.approx(D / 1000)


def test_a_rank_that_starts_its_compute_late_costs_its_host_stall(tmp_path):
    """Rank 1's GPU idles D µs longer before its compute (the host launched it late): the cost is
    D in its host stall before the all-reduce, none in its compute."""
    for r in range(4):
        _rank_file(tmp_path, r, 4, 0, late=D if r == 1 else 0)
    v = ta.straggler_view(tmp_path)
    assert _cost(v.costs, 1, "host_stall") == pytest.approx(D / 1000, abs=1e-9)
    assert v.costs.filter(~((pl.col("rank") == 1) & (pl.col("phase") == "host_stall")))["cost_ms_per_step"].abs().max() <= 1e-9
    # the analysis keeps the same view, computed once; a selection of three ranks computes its own
    a = ta.analyze(tmp_path)
    assert a.straggler_view()["costs"].row(0) == v.costs.row(0) and a.straggler_view() is a.straggler_view()
    sel = ta.select(a, ranks=[0, 2, 3])
    assert ta.straggler_costs(sel)["cost_ms_per_step"].abs().max() == 0.0
    assert (ta.replay(sel)["replayed_ms"] - ta.replay(sel)["measured_ms"]).abs().max() < 1e-9


def test_two_ranks_tied_as_last_arrivals_each_cost_nothing_alone(tmp_path):
    v = _job(tmp_path, {0: 0, 1: D, 2: D, 3: 0})
    assert _cost(v.costs, 1, "compute") == 0.0 and _cost(v.costs, 2, "compute") == 0.0
    # together they cost D (the median of 0, D, D, 0 is D/2: every rank made typical saves D/2)
    assert v.total_cost_ms_per_step == pytest.approx(D / 2000)
    assert any("same time" in w for w in v.warnings)
    # the wait of ranks 0 and 3 is shared between the two late ranks
    m = v.wait_matrix.filter(rank=0)
    assert m["on_rank"].to_list() == [1, 2] and m["wait_ms_per_step"].to_list() == pytest.approx([D / 2000] * 2)


def test_a_missing_rank_is_warned_and_the_others_wait_only_for_the_loaded(tmp_path):
    v = _job(tmp_path, {0: 0, 1: 0, 2: D})  # rank 3 of 4 not loaded
    assert any("group default has 4 ranks, 3 loaded" in w for w in v.warnings)
    assert _cost(v.costs, 2, "compute") == pytest.approx(D / 1000)


def test_a_rank_with_no_collective_is_replayed_alone(tmp_path):
    _rank_file(tmp_path, 0, 3, 0)
    _rank_file(tmp_path, 1, 3, D)
    _rank_file(tmp_path, 2, 3, 0, collectives=0)
    v = ta.straggler_view(tmp_path)
    assert any("rank 2 has no collective" in w for w in v.warnings)
    assert v.costs.filter(rank=2)["cost_ms_per_step"].abs().max() == 0.0
    # ranks 0 and 1 only: the median of C and C + D is C + D/2
    assert _cost(v.costs, 1, "compute") == pytest.approx(D / 2000)


def test_mismatched_collective_counts_are_not_matched_and_cost_nothing(tmp_path):
    _rank_file(tmp_path, 0, 2, 0)
    _rank_file(tmp_path, 1, 2, D, collectives=1)
    v = ta.straggler_view(tmp_path)
    assert any("disagree on the number of collectives (rank 0: 2, rank 1: 1)" in w for w in v.warnings)
    assert v.wait_matrix.height == 0
    assert (v.replay["replayed_ms"] - v.replay["measured_ms"]).abs().max() < 1e-9


# a one-layer transformer over 4 data-parallel GPUs: hidden 64, one head (head_dim 64), a 4h GeLU
# MLP, a vocabulary of 64. Weights a GPU holds and reduces Ψ = attention h(d + 2d) + d·h = 16384,
# MLP 2·h·4h = 32768, output layer h·V = 4096: 53248. The gradient all-reduce (fp32) moves 2(d−1)/d · 4 · Ψ = 1.5 · 4 · 53248 = 319488 bytes
# per GPU and step (Megatron's DP all-reduce; nccl-tests' ring factor)
TINY = """
[model]
layers = 1
hidden = 64
heads = 1
seq_length = 16
vocab = 64
activation = "gelu"
[batch]
global_batch = 4
micro_batch = 1
[parallel]
dp = 4
grad_reduce_dtype = "fp32"
[hardware]
gpu = "NVIDIA H100 80GB HBM3"
num_gpus = 4
precision = "bf16"
"""
PSI = 64 * (64 + 2 * 64) + 64 * 64 + 2 * 64 * 256 + 64 * 64
PREDICTED = 2 * 3 / 4 * 4 * PSI


@pytest.mark.parametrize("nelems,ratio,warned", [(PSI, 1.0, False), (2 * PSI, 2.0, True)])
def test_bytes_per_dimension_measured_beside_predicted(tmp_path, capsys, monkeypatch, nelems, ratio, warned):
    monkeypatch.setenv("COLUMNS", "200")  # the table's cells on one line whatever the worker's terminal
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    traces = tmp_path / "job"
    traces.mkdir()
    for r in range(4):
        _rank_file(traces, r, 4, D if r == 2 else 0, nelems=nelems)
    t = ta.comm_bytes(traces, cfg).filter(dim="DP").row(0, named=True)
    # measured: one all-reduce of `nelems` floats per rank and step, bus bytes 2(n−1)/n × 4 × nelems
    assert t["measured_bytes"] == pytest.approx(1.5 * 4 * nelems)
    assert t["predicted_bytes"] == pytest.approx(PREDICTED)
    assert t["ratio"] == pytest.approx(ratio) and t["warning"] is warned
    assert (t["kernels"], t["sized"]) == (1.0, 1.0)
    doc = ta.reconcile(traces, cfg).to_dict()
    assert [r["dim"] for r in doc["comm_bytes"]] == ["DP"]
    assert any("more than 20 % apart" in w for w in doc["warnings"]) is warned
    # reconcile -c prints the table: measured and predicted MB, the ratio, "!" past 20 %
    from traceanalyzer.cli import main

    assert main(["reconcile", str(traces), "-c", str(cfg), "-q"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("│ DP"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[1] == f"{1.5 * 4 * nelems / 1e6:.3f}" and cells[3] == f"{PREDICTED / 1e6:.3f}" and cells[4] == f"{ratio:.2f}x"
    assert (cells[5:] == ["!"]) is warned  # an empty column is not printed
