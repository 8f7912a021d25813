"""The kernel and op tables (``traceanalyzer kernels`` / ``ops``): exact shares against the
breakdown, per-kernel times against HTA, FLOPs and achieved TFLOP/s by hand."""

from __future__ import annotations

import gzip
import json

import orjson
import polars as pl
import pytest

from traceanalyzer.classify.kernelstats import nearest_rank
from traceanalyzer.classify.shapes import op_cost
from traceanalyzer.api import kernels, ops
from traceanalyzer.api.tables import analysis_with_tables

from conftest import DEMO, DLRM, PYTHONPATH, ROOT, TRACES, needs_shared, run_cli

B200 = TRACES / "kineto-public" / "tracelens-amd" / "b200_eager_trace_rank0.json.gz"
CONTROL = TRACES / "hta" / "trace_diff" / "control" / "control.json.gz"
BUCKET_OF = {"compute": "compute_ns", "recompute": "recompute_ns", "comm": "exposed_comm_ns", "other": "other_ns"}


# ---------------------------------------------------------------------------------------------
# shapes -> FLOPs (each by hand)


def test_gemm_flops_by_hand():
    assert op_cost("aten::mm", "[[128,256],[256,64]]").flops == 2 * 128 * 256 * 64
    assert op_cost("aten::mm", "[[128,256],[256,64]]").elements == 128 * 256 + 256 * 64 + 128 * 64
    c = op_cost("aten::addmm", "[[640],[888,2880],[2880,640],[],[]]")
    assert (c.flops, c.elements) == (2 * 888 * 2880 * 640, 888 * 2880 + 2880 * 640 + 888 * 640 + 640)
    assert op_cost("aten::bmm", "[[8,32,16],[8,16,4]]").flops == 2 * 8 * 32 * 16 * 4
    assert op_cost("aten::baddbmm", "[[8,32,4],[8,32,16],[8,16,4],[],[]]").flops == 2 * 8 * 32 * 16 * 4
    # linear: x [4, 32, 64], W [128, 64] -> 2 * (4*32) * 64 * 128
    assert op_cost("aten::linear", "[[4,32,64],[128,64],[128]]").flops == 2 * 128 * 64 * 128
    assert op_cost("aten::matmul", "[[4,32,64],[64,16]]").flops == 2 * 128 * 64 * 16
    assert op_cost("aten::matmul", "[[4,1,32,64],[1,3,64,16]]").flops == 2 * 12 * 32 * 64 * 16
    # attention forward: q,k,v [B=2,H=4,L=128,D=64]: QK^T and PV, 2*B*H*L*L*D each
    assert op_cost("aten::_scaled_dot_product_flash_attention", "[[2,4,128,64],[2,4,128,64],[2,4,128,64],[],[]]").flops == 4 * 2 * 4 * 128 * 128 * 64
    bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward", "[[2,4,128,64],[2,4,128,64],[2,4,128,64],[2,4,128,64]]")
    assert bwd.flops == 10 * 2 * 4 * 128 * 128 * 64


@pytest.mark.parametrize("name,dims", [
    ("aten::mm", "[[128,256],[255,64]]"),  # inner dimensions differ
    ("aten::mm", "[[128,256]]"),
    ("aten::conv2d", "[[10,256,14,14],[512,256,3,3],[512],[],[],[],[]]"),  # stride/padding unknown
    ("aten::add", "[[4,4],[4,4]]"),
    ("aten::mm", "not json"),
    ("aten::mm", None),
])
def test_no_formula_gives_none(name, dims):
    assert op_cost(name, dims) is None


def test_nearest_rank_percentiles_by_hand():
    df = pl.DataFrame({"d": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [7], []]}, schema={"d": pl.List(pl.Int64)})
    out = df.select(nearest_rank(pl.col("d"), 50).alias("p50"), nearest_rank(pl.col("d"), 99).alias("p99"))
    # n=10: p50 = 5th value, p99 = ceil(9.9) = 10th value; n=1: the value; empty: null
    assert out.to_dicts() == [{"p50": 5, "p99": 10}, {"p50": 7, "p99": 7}, {"p50": None, "p99": None}]


# ---------------------------------------------------------------------------------------------
# exact: kernel shares sum to the breakdown's buckets


def _bucket_sums_match(an) -> None:
    rows = an.kernel_stats.group_by("rank", "step", "cls").agg(pl.col("bucket_ns").sum())
    got = rows.pivot(on="cls", index=["rank", "step"], values="bucket_ns")
    steps = an.steps.select("rank", "step", *BUCKET_OF.values())
    j = steps.join(got, on=["rank", "step"], how="left")
    for cls, col in BUCKET_OF.items():
        mine = j.get_column(cls).fill_null(0) if cls in j.columns else pl.Series([0] * j.height)
        assert mine.to_list() == j.get_column(col).to_list(), (cls, col)
    # and calls: every kernel starting in a step window is counted once
    assert an.kernel_stats.get_column("calls").sum() == an.kernel_stats.get_column("durations").list.len().sum()


def _independent_steps(path) -> dict[int, list[dict]]:
    """rank -> its steps in time order as counted from the raw JSON without the package
    (tests/data/hta_reference.json ``raw_steps``; compute there includes recompute)."""
    ref = json.loads((ROOT / "tests" / "data" / "hta_reference.json").read_text())["jobs"]
    out = {}
    for f in sorted(path.glob("*.json.gz")) if path.is_dir() else [path]:
        [entry] = [e for job, j in ref.items() if not job.endswith("(folder as one job)")
                   for name, e in j["per_file"].items() if name == f.name]
        out[entry["distributedInfo_rank"] or 0] = entry["raw_steps"]["steps"]
    return out


@needs_shared()
@pytest.mark.parametrize("path", [B200, CONTROL, DEMO, DLRM], ids=["b200", "hta-control", "mi300x-recompute", "dlrm-8-ranks"])
def test_kernel_shares_sum_to_buckets_exactly(path):
    an = analysis_with_tables(path)
    _bucket_sums_match(an)
    if path == B200:  # no step markers: no independent per-step count (test_hta_reference.py has the whole trace)
        return
    # and to the buckets counted independently from the raw JSON
    sums = an.kernel_stats.group_by("rank", "step", "cls").agg(pl.col("bucket_ns").sum())
    share = {(r, st, c): v for r, st, c, v in sums.rows()}
    ref = _independent_steps(path)
    assert sorted(ref) == sorted(an.steps["rank"].unique().to_list())
    for rank, steps in ref.items():
        mine = an.steps.filter(pl.col("rank") == rank).sort("start_ns")["step"].to_list()
        assert len(mine) == len(steps) > 0
        for st, r in zip(mine, steps, strict=True):
            assert share.get((rank, st, "compute"), 0) + share.get((rank, st, "recompute"), 0) == r["compute_ns"]
            assert share.get((rank, st, "comm"), 0) == r["exposed_comm_ns"]
            assert share.get((rank, st, "other"), 0) == r["other_ns"]


@needs_shared()
@pytest.mark.parametrize("path", [B200, DEMO, DLRM], ids=["b200", "mi300x-recompute", "dlrm-8-ranks"])
def test_tables_computed_on_demand_equal_the_workers_rows(path):
    """``ta.analyze`` leaves the per-kernel and per-op rows out; ``kernels()`` / ``ops()`` compute
    them from the analysis's events when asked, in a new analysis (the one given is never
    changed): the same rows as the rank workers compute, and on a ``select`` cut the rows of the
    whole analysis on those ranks and steps."""
    import traceanalyzer as ta
    from traceanalyzer.engine import with_tables

    eager = analysis_with_tables(path)
    lazy = ta.analyze(path)
    assert lazy.kernel_stats is None and lazy.op_stats is None
    filled = with_tables(lazy, "kernel_stats")
    assert filled is not lazy and lazy.kernel_stats is None and with_tables(filled, "kernel_stats") is filled
    assert filled.kernel_stats.equals(eager.kernel_stats) and filled.op_stats.equals(eager.op_stats)
    assert filled.kernel_stats.height and filled.op_stats.height
    rank, step = eager.steps.row(-1, named=True)["rank"], eager.steps.row(-1, named=True)["step"]
    cut = with_tables(ta.select(ta.analyze(path), ranks=[rank], steps=[step]), "kernel_stats")
    for name in ("kernel_stats", "op_stats"):
        want = getattr(eager, name).filter((pl.col("rank") == rank) & (pl.col("step") == step))
        assert getattr(cut, name).equals(want), name
        assert getattr(ta.select(eager, ranks=[rank], steps=[step]), name).equals(want), name


@needs_shared()
def test_kernel_shares_whole_trace_and_table_totals():
    an = analysis_with_tables(CONTROL, None)
    _bucket_sums_match(an)
    table = kernels(an)
    by = dict(table.group_by("bucket").agg(pl.col("bucket_ns").sum()).iter_rows())
    tot = an.steps.select(*[pl.col(c).sum() for c in BUCKET_OF.values()]).row(0, named=True)
    assert {b: by.get(b, 0) for b in BUCKET_OF} == {b: tot[c] for b, c in BUCKET_OF.items()}
    # shares of the wall time: the four buckets plus idle make 100 %
    idle = int(an.steps["idle_ns"].sum())
    assert table["share_pct"].sum() + 100 * idle / int(an.steps["duration_ns"].sum()) == pytest.approx(100.0, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# against HTA

# HTA 0.5.0 (the hta venv), run once offline on the B200 trace alone in a directory:
#   HTA_DISABLE_NS_ROUNDING=1 python -c "from hta.trace_analysis import TraceAnalysis;
#     ta = TraceAnalysis(trace_dir=DIR); _, k = ta.get_gpu_kernel_breakdown(visualize=False,
#     include_memory_kernels=True, num_kernels=10000, duration_ratio=1.0)"
# -> per kernel: sum (us), max (us), min (us), mean (us); count = sum / mean. Without
# HTA_DISABLE_NS_ROUNDING HTA rounds every ns-resolution event to whole µs (ts up, end down),
# see docs/validation.md. The trace has no ProfilerStep, so HTA keeps every kernel.
HTA_B200 = {  # name prefix: (count, sum us, max us, min us)
    "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3": (36, 3181.785, 104.032, 75.328),
    "void (anonymous namespace)::multimem_all_reduce_kernel": (73, 2119.548, 223.2, 24.704),
    "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3": (36, 2033.052, 62.272, 51.552),
    "Memcpy DtoD (Device -> Device)": (146, 781.5, 10.016, 2.976),
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists": (72, 452.068, 6.976, 5.696),
    "void at::native::vectorized_gather_kernel<16, long>": (1, 4.576, 4.576, 4.576),
}
HTA_B200_ROWS, HTA_B200_TOTAL_US = 32, 11740.151  # HTA's row count and summed "sum (us)"


@needs_shared()
def test_per_kernel_times_match_hta():
    k = kernels(B200, step_range=None)
    for prefix, (count, sum_us, max_us, min_us) in HTA_B200.items():
        row = k.filter(pl.col("name").str.starts_with(prefix))
        assert row.height == 1, prefix
        r = row.row(0, named=True)
        assert (r["calls"], r["total_ns"], r["max_ns"], r["min_ns"]) == (count, round(sum_us * 1000), round(max_us * 1000), round(min_us * 1000))
    # the same 32 names; HTA counts one more call: the host op of the inductor kernel
    # triton_poi_fused_add_..._0 (74.391 us), which carries a "stream" argument, beside the
    # 1.984 us kernel of that name on the GPU (HTA: 2 calls, 76.375 us; ours: 1, 1.984 us)
    assert k.height == HTA_B200_ROWS
    tri = k.filter(pl.col("name").str.starts_with("triton_poi_fused_add_bitwise_and")).row(0, named=True)
    assert (tri["calls"], tri["total_ns"]) == (1, 1984)
    assert int(k["total_ns"].sum()) == round(HTA_B200_TOTAL_US * 1000) - 74391


# ---------------------------------------------------------------------------------------------
# achieved TFLOP/s of a GEMM, by hand from the raw JSON


@needs_shared()
def test_gemm_tflops_by_hand():
    raw = json.loads(gzip.decompress(B200.read_bytes()))["traceEvents"]
    dims = [[640], [888, 2880], [2880, 640], [], []]
    ext = {e["args"]["External id"] for e in raw if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm" and e["args"].get("Input Dims") == dims}
    kern = [e for e in raw if e.get("cat") == "kernel" and e["args"].get("External id") in ext]
    assert len(ext) == len(kern) == 36  # one GEMM kernel per call
    gpu_ns = sum(round(e["dur"] * 1000) for e in kern)
    flops = 36 * 2 * 888 * 2880 * 640  # addmm(bias, [M,K], [K,N]): 2*M*K*N per call
    by_hand = flops / (gpu_ns * 1e-9) / 1e12

    o = ops(B200, name=r"^aten::addmm$", precision="bf16")
    r = o.filter(pl.col("input_dims") == orjson.dumps(dims).decode()).row(0, named=True)
    assert (r["calls"], r["kernels"], r["gpu_ns"], r["flops"]) == (36, 36, gpu_ns, flops)
    assert r["tflops"] == pytest.approx(by_hand, rel=1e-12)
    assert r["tflops"] == pytest.approx(410.0118, abs=1e-3)
    # bytes: bf16, (M*K + K*N + M*N + bias) elements per call
    assert r["bytes"] == 36 * 2 * (888 * 2880 + 2880 * 640 + 888 * 640 + 640)
    # roofline on B200 (bf16 2250 TFLOP/s dense, 8000 GB/s): intensity = flops / bytes FLOP/B
    attainable = min(2250.0, flops / r["bytes"] * 8000 / 1e3)
    assert r["roofline_pct"] == pytest.approx(100 * by_hand / attainable, rel=1e-12)
    # the kernel table carries the same FLOPs on the one kernel each call launched
    kr = kernels(B200, name="nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT").row(0, named=True)
    assert (kr["flops_calls"], kr["flops"], kr["total_ns"]) == (36, flops, gpu_ns)
    assert kr["tflops"] == pytest.approx(by_hand, rel=1e-12)
    # the name states no precision: the launching op's recorded input types do (c10::BFloat16)
    assert kr["precision"] == "bf16" and kr["roofline_pct"] == pytest.approx(r["roofline_pct"], rel=1e-12)
    # and the op table needs no --precision either
    r2 = ops(B200, name=r"^aten::addmm$").filter(pl.col("input_dims") == orjson.dumps(dims).decode()).row(0, named=True)
    assert (r2["precision"], r2["bytes"]) == ("bf16", r["bytes"])


# ---------------------------------------------------------------------------------------------
# filters and the command line


@needs_shared()
def test_filters_rank_step_name_top():
    an = analysis_with_tables(DLRM)
    full = kernels(an)
    one = kernels(an, ranks=3)
    assert one["calls"].sum() == an.kernel_stats.filter(pl.col("rank") == 3)["calls"].sum()
    assert one["ranks"].max() == 1 and full["ranks"].max() == 8
    nccl = kernels(an, name="^nccl", sort="calls", top=1)
    assert nccl.height == 1 and nccl["name"][0].startswith("nccl")
    assert nccl["calls"][0] == full.filter(pl.col("name").str.contains("^nccl"))["calls"].max()
    steps = an.steps["step"].unique().to_list()
    assert kernels(an, steps=steps)["total_ns"].sum() == full["total_ns"].sum()
    assert kernels(an, steps=[10**9]).height == 0


@needs_shared()
def test_cli_formats(tmp_path):
    out = tmp_path / "k.parquet"
    r = run_cli("kernels", str(DEMO), "-f", "parquet", "-o", str(out), "-q")
    assert r.returncode == 0, r.stderr
    pq = pl.read_parquet(out)
    assert pq["total_ns"].dtype == pl.Int64 and pq.height > 20
    # to a pipe as well (never to a terminal): the same table
    import os
    import subprocess
    import sys

    piped = subprocess.run([sys.executable, "-m", "traceanalyzer", "kernels", str(DEMO), "-f", "parquet", "-q"], capture_output=True,
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert piped.returncode == 0 and pl.read_parquet(piped.stdout).equals(pq)
    r = run_cli("kernels", str(DEMO), "-f", "json", "--top", "3", "-q")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "traceanalyzer.kernels" and len(doc["rows"]) == 3
    assert [x["total_ns"] for x in doc["rows"]] == pq.sort(["total_ns", "name"], descending=[True, False])["total_ns"].head(3).to_list()
    r = run_cli("ops", str(DEMO), "-f", "csv", "--name", "^aten::mm$", "-q")
    csv = pl.read_csv(r.stdout.encode())
    assert r.returncode == 0 and set(csv["name"]) == {"aten::mm"}
    r = run_cli("kernels", str(DEMO), "--top", "4", "-q")
    assert r.returncode == 0 and "Kernels by total (top 4)" in r.stdout


@needs_shared()
@pytest.mark.parametrize("args,code,words", [
    # usage errors, as for every command: one line, exit 2
    (["--name", "("], 2, "Invalid value for '--name': '(' is not a valid regular expression"),
    (["--sort", "nope"], 2, "Invalid value for '--sort': 'nope' is not one of 'total'"),
    (["--precision", "int4"], 2, "Invalid value for '--precision': 'int4' is not one of 'fp8'"),
    (["--top", "0"], 2, "Invalid value for '--top'"),
    (["--recompute-range", "("], 2, "Invalid value for '--recompute-range'"),
    (["--rank", "5"], 2, "Invalid value for '--rank': no rank 5 with GPU work in the trace (ranks: 0)"),
    (["--step", "3"], 2, "Invalid value for '--step': no step 3 in the trace (steps: 15, 16, 17)"),
])
def test_cli_bad_options(args, code, words):
    r = run_cli("kernels", str(DEMO), *args, "-q")
    assert r.returncode == code and words in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@needs_shared()
def test_cli_never_overwrites_an_input(tmp_path):
    r = run_cli("kernels", str(DEMO), "-f", "csv", "-o", str(DEMO), "-q")
    assert r.returncode == 3 and "refusing to overwrite an input" in r.stderr


@needs_shared()
def test_cpu_only_trace_exits_5():
    r = run_cli("kernels", str(TRACES / "torch-cpu" / "cpu_no_ckpt.pt.trace.json.gz"), "-q")
    assert r.returncode == 5 and "no GPU activity" in r.stderr


def test_ops_link_kernels_whose_external_id_is_the_correlation():
    """In the PARAM DLRM traces a kernel's External id is its correlation id (no op has it): the
    op is the innermost cpu_op enclosing the launch call on its thread. Reference: a plain
    Python walk of the JSON (for every launch call, the innermost enclosing cpu_op)."""
    import collections
    import gzip
    import json

    f = DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz"
    ev = json.load(gzip.open(f))["traceEvents"]
    host_ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    kern = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel"}
    gpu, cnt = collections.Counter(), collections.Counter()
    for r in (e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X"):
        c = r["args"].get("correlation")
        enc = [o for o in host_ops if (o["pid"], o["tid"]) == (r["pid"], r["tid"]) and o["ts"] <= r["ts"] and o["ts"] + o["dur"] >= r["ts"] + r["dur"]]
        if c in kern and enc:
            inner = max(enc, key=lambda o: (o["ts"], -o["dur"]))
            gpu[inner["name"]] += kern[c]["dur"] * 1000
            cnt[inner["name"]] += 1
    assert (cnt["aten::addmm"], gpu["aten::addmm"]) == (11, 72_000)  # by hand from the walk above
    got = ops(f, name=r"^aten::(addmm|mm|bmm)$").group_by("name").agg(pl.col("kernels").sum(), pl.col("gpu_ns").sum())
    assert {r["name"]: (r["kernels"], r["gpu_ns"]) for r in got.iter_rows(named=True)} == {
        n: (cnt[n], gpu[n]) for n in ("aten::addmm", "aten::mm", "aten::bmm")
    }
