"""Communication that is not NCCL: the library table, user patterns, dimension hints and the
no-communication warning.

The traces are real fixtures cut down in memory: rank 0 of the 8-rank DLRM step (V100, NCCL on
its own stream, overlapping compute) with every piece of NCCL evidence removed
(``record_param_comms`` ops, ``nccl:*`` annotations) and its NCCL kernels renamed to the names
DeepEP and Transformer Engine userbuffers kernels carry (taken from those projects' public
sources). The kernels keep their real times, so the expected exposure per dimension is derived
by hand from the raw JSON on a 1 µs grid (DLRM timestamps are whole microseconds).
"""

from __future__ import annotations

import gzip
import re

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import collkind
from traceanalyzer.classify.labels import COMM_KERNEL, label_gpu, library_expr
from traceanalyzer.render import json as json_render
from traceanalyzer.schema import Trace

from conftest import DLRM, FIXTURES, interval_union, run_cli

DLRM0 = sorted(DLRM.glob("worker0_*"))[0]
ALEXNET = FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz"

# real kernel names, as the profiler writes them (demangled ``__global__`` functions)
DEEPEP = "void deep_ep::internode::dispatch<false, 2, 8, 4, 24, 8>(int4*, float*, long*, float*, SourceMeta*)"
DEEPEP_DSK = "dpsk::ep::internode::combine"  # the spelling of DeepSeek's published profiles
UB_AR = "void userbuffers_fp16_sum_inplace_gpu_rw<8>(int, int, int, int, int, int, int, void**, int, unsigned long)"
UB_AG = "void userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(int, int, int, int, int, int, int, void**, int, unsigned long)"
UB_RS = "void userbuffers_fp16_sum_inplace_gpu_rr_rs_oop<8>(int, int, int, int, int, int, int, int, int, void**, int, void*, unsigned long)"
UB_SEND = "kuserbuffers_pushsend(int*, int*, int4*, int4*, int)"
VLLM_AR = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)"
VLLM_AR2 = "void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, float*, int, int)"
TRTLLM_AR = "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(tensorrt_llm::kernels::AllReduceParams)"
TRTLLM_AR2 = "void tensorrt_llm::kernels::twoShotAllReduceKernel<half, 4, false>(tensorrt_llm::kernels::AllReduceParams)"
MSCCLPP_AR = "void mscclpp::collective::allreduceFullmesh<__half>(__half*, __half*, __half*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, int, int)"
NVSHMEM_A2A = "c10d::nvshmem_extension::allToAllV(void*, void*, long*, unsigned long, int)"
DEEPEP_LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)"


def test_library_table_names_type_and_dimension():
    want = {  # name -> (library, type, dimension), from each project's kernel sources
        DEEPEP: ("DeepEP", "all_to_all", "EP"),
        DEEPEP_DSK: ("DeepEP", "all_to_all", "EP"),
        "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)": ("DeepEP", "all_to_all", "EP"),
        "void deep_ep::internode_ll::combine<false>(void*, void*)": ("DeepEP", "all_to_all", "EP"),
        "void deep_ep::intranode::barrier<8>(int**, int)": ("DeepEP", "barrier", "EP"),
        "void deep_ep::elastic::pp_send_recv_impl<1, 2>(void*)": ("DeepEP", "send_recv", "PP"),
        UB_AR: ("TE userbuffers", "all_reduce", "TP"),
        UB_AG: ("TE userbuffers", "all_gather", "TP"),
        UB_RS: ("TE userbuffers", "reduce_scatter", "TP"),
        UB_SEND: ("TE userbuffers", "send_recv", "TP"),
        VLLM_AR: ("custom all-reduce", "all_reduce", "TP"),
        VLLM_AR2: ("custom all-reduce", "all_reduce", "TP"),
        TRTLLM_AR: ("custom all-reduce", "all_reduce", "TP"),
        TRTLLM_AR2: ("custom all-reduce", "all_reduce", "TP"),
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**, float*)": ("custom all-reduce", "all_reduce", "TP"),
        MSCCLPP_AR: ("MSCCL/MSCCL++", "all_reduce", None),
        "void mscclpp::collective::allgatherFullmesh2<false>(void*, void*)": ("MSCCL/MSCCL++", "all_gather", None),
        "void mscclpp::executionKernel<__half>(int, __half*)": ("MSCCL/MSCCL++", None, None),
        "mscclKernel_Sum_float_LL128": ("MSCCL/MSCCL++", None, None),
        NVSHMEM_A2A: ("NVSHMEM", "all_to_all", "EP"),
        "barrier_on_stream_kernel(int, int, int, long*)": ("NVSHMEM", "barrier", None),
        "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)": ("NCCL/RCCL", None, None),
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)": ("NCCL/RCCL", None, None),
    }
    not_comm = [  # compute kernels whose names share words with communication
        DEEPEP_LAYOUT,
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float>)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "void moe_align_block_size_kernel<int>(int const*, int*)",
        "void dispatch_layout_kernel(int)",
        "triton_poi_fused_all_gather_into_tensor_copy_0",
    ]
    df = pl.DataFrame({"name": [*want, *not_comm]})
    got = df.select(
        "name",
        library_expr("name", 0).alias("lib"),
        library_expr("name", 2).alias("type"),
        library_expr("name", 3).alias("dim"),
        (pl.col("name").str.contains(COMM_KERNEL) & library_expr("name", 0).is_not_null()).alias("comm"),
    )
    rows = {r[0]: r[1:] for r in got.iter_rows()}
    for name, (lib, typ, dim) in want.items():
        assert rows[name] == (lib, typ, dim, True), name
    for name in not_comm:
        assert rows[name] == (None, None, None, False), name
    # by default: the library, from the column "name"
    assert df.select(library_expr()).to_series().to_list() == got["lib"].to_list()


def _raw():
    return orjson.loads(gzip.open(DLRM0).read())["traceEvents"]


RENAME = {"ncclKernel_SendRecv": DEEPEP, "ncclKernel_AllReduce": UB_AR}


def _cut_down(rename: dict[str, str] = RENAME) -> Trace:
    """DLRM rank 0 without NCCL evidence, its NCCL kernels renamed (prefix -> new name)."""
    t = ta.load(DLRM0)
    ev = t.events.filter((pl.col("name") != "record_param_comms") & ~pl.col("name").str.starts_with("nccl:"))
    name = pl.col("name")
    for prefix, new in rename.items():
        name = pl.when(pl.col("name").str.starts_with(prefix)).then(pl.lit(new)).otherwise(name)
    return Trace(events=ev.with_columns(name.alias("name")), meta=t.meta, warnings=[], sources=t.sources)


def _hand():
    """From the raw JSON: the step window (µs) and the kernels by what they become."""
    ev = [e for e in _raw() if e.get("ph") == "X"]
    step = [e for e in ev if re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))][0]
    s0, s1 = step["ts"], step["ts"] + step["dur"]
    launches = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    mine = [e for e in gpu if s0 <= launches.get(e["args"].get("correlation"), -1) < s1]
    window = (min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine))
    iv = lambda pred: [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["cat"] == "kernel" and pred(e["name"])]
    return {
        "window": window,
        "EP": iv(lambda n: n.startswith("ncclKernel_SendRecv")),
        "TP": iv(lambda n: n.startswith("ncclKernel_AllReduce")),
        "compute": iv(lambda n: not n.startswith("nccl")),
    }


def test_deepep_and_userbuffers_are_exposed_comm_with_their_dimension():
    h = _hand()
    a = ta.analyze(_cut_down())
    assert a.gpu.filter(pl.col("name") == DEEPEP)["cls"].to_list() == ["comm"] * len(h["EP"]) and len(h["EP"]) == 5
    assert a.gpu.filter(pl.col("name") == UB_AR)["cls"].to_list() == ["comm"] * len(h["TP"]) and len(h["TP"]) == 3
    c = a.collectives
    assert sorted(c.select("name", "coll_type", "dim").unique().rows()) == sorted([(DEEPEP, "all_to_all", "EP"), (UB_AR, "all_reduce", "TP")])
    # hand: 1 µs grid over the step window, exposed = no compute kernel runs
    w0, w1 = h["window"]
    want = {"EP": 0, "TP": 0, "concurrent": 0}
    for t in range(w0, w1):
        if any(s <= t < e for s, e in h["compute"]):
            continue
        on = [d for d in ("EP", "TP") if any(s <= t < e for s, e in h[d])]
        if on:
            want[on[0] if len(on) == 1 else "concurrent"] += 1000
    step = a.steps.row(0, named=True)
    assert step["exposed_comm_ep_ns"] == want["EP"] > 0
    assert step["exposed_comm_tp_ns"] == want["TP"] > 0
    assert step["exposed_comm_concurrent_ns"] == want["concurrent"]
    assert step["exposed_comm_ns"] == sum(want.values())
    # the partition still sums exactly, and equals the NCCL original's (same intervals are comm)
    assert sum(step[f"{b}_ns"] for b in ("compute", "recompute", "exposed_comm", "other", "idle")) == step["duration_ns"]
    orig = ta.analyze(ta.load(DLRM0)).steps.row(0, named=True)
    for f in ("duration_ns", "compute_ns", "exposed_comm_ns", "overlapped_comm_ns", "other_ns", "idle_ns"):
        assert step[f] == orig[f], f
    # no byte count, one rank loaded: wait/transfer unknown, never "estimated from bytes"
    assert c["bytes"].null_count() == c.height and c["transfer_ns"].null_count() == c.height
    assert not c["transfer_estimated"].any()
    assert not any("estimate" in w for w in a.warnings)
    assert any("is unknown: the trace gives no byte count" in w for w in a.warnings)
    doc = json_render.document(a)["ranks"][0]["collectives"]["by_dimension"]
    assert [(d["dimension"], d["exposed_us"], d["wait_us"], d["transfer_us"], d["transfer_estimated"]) for d in doc] == [
        ("EP", want["EP"] / 1000, None, None, False), ("TP", want["TP"] / 1000, None, None, False)]


def test_deepseek_spelling_and_a_dispatch_annotation_give_ep():
    # an unknown kernel under a user 'dispatch' annotation, named with --comm-kernel: EP
    t = _cut_down({"ncclKernel_SendRecv": "my_a2a_kernel", "ncclKernel_AllReduce": DEEPEP_DSK})
    ev = t.events
    launch = ev.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_in(
        ev.filter(pl.col("name") == "my_a2a_kernel")["correlation"].implode()))
    ann = launch.select(
        "rank", "pid", "tid", pl.lit("annotation").cast(ev.schema["kind"]).alias("kind"),
        pl.lit("moe_token_dispatch").alias("name"), (pl.col("start_ns") - 1).alias("start_ns"), (pl.col("end_ns") + 1).alias("end_ns"),
    )
    t = Trace(events=pl.concat([ev, ann], how="diagonal_relaxed").select(ev.columns).cast(ev.schema), meta=t.meta, sources=t.sources)
    a = ta.analyze(t, comm_kernels=["^my_a2a"])
    c = a.collectives.select("name", "coll_type", "dim").unique().sort("name").rows()
    assert c == [(DEEPEP_DSK, "all_to_all", "EP"), ("my_a2a_kernel", "all_to_all", "EP")]
    step = a.steps.row(0, named=True)
    assert step["exposed_comm_ep_ns"] == step["exposed_comm_ns"] > 0


def test_multi_rank_job_without_communication_warns():
    a = ta.analyze(_cut_down({"ncclKernel_SendRecv": "my_a2a_kernel", "ncclKernel_AllReduce": "my_ar_kernel"}))
    assert a.collectives.height == 0 and a.steps["exposed_comm_ns"].sum() == 0
    warn = [w for w in a.warnings if "no communication kernel was found" in w]
    assert len(warn) == 1 and warn[0].startswith("rank 0: part of a 8-rank job")
    # the API names its argument; the command line prints its flag
    assert warn[0].endswith("name them in `comm_kernels` (regexes of their names)")
    from traceanalyzer.commands.flags import as_flags

    assert as_flags(warn[0]).endswith("name them in --comm-kernel (regexes of their names)")
    # the same trace with its NCCL evidence: no such warning
    assert not any("no communication kernel" in w for w in ta.analyze(ta.load(DLRM0)).warnings)


def test_deepep_layout_kernel_stays_compute():
    """Layout kernels of DeepEP compute a routing table: never communication by name."""
    t = _cut_down({"ncclKernel_SendRecv": DEEPEP_LAYOUT, "ncclKernel_AllReduce": "my_ar_kernel"})
    gpu = label_gpu(t.events)
    assert set(gpu.filter(pl.col("name") == DEEPEP_LAYOUT)["cls"]) == {"compute"}


def _sgemm_union() -> int:
    """The union of alexnet's sgemm kernels in ns, from the raw JSON by hand."""
    raw = orjson.loads(gzip.open(ALEXNET).read())["traceEvents"]
    sg = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in raw
                if e.get("ph") == "X" and e.get("cat") == "kernel" and "sgemm" in e["name"].lower())
    others = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in raw
              if e.get("ph") == "X" and e.get("cat") == "kernel" and "sgemm" not in e["name"].lower()]
    assert sg and not any(s < e2 and s2 < e for s, e in sg for s2, e2 in others)  # one stream: no overlap
    return interval_union(sg)


def test_comm_kernel_option_on_the_cli():
    """alexnet (A100, one stream) has no communication; --comm-kernel 'sgemm' makes its sgemm
    kernels communication: exposed comm = their union, from the raw JSON by hand."""
    union = _sgemm_union()
    r = run_cli("breakdown", ALEXNET, "--comm-kernel", "SGEMM", "--comm-kernel", "no_such_kernel", "-f", "json")
    assert r.returncode == 0, r.stderr
    total = orjson.loads(r.stdout)["ranks"][0]["total"]
    assert round(total["exposed_comm_us"] * 1000) == union
    bad = run_cli("breakdown", ALEXNET, "--comm-kernel", "(?=x)")
    assert bad.returncode == 7 and bad.stderr.count("\n") == 1 and "--comm-kernel '(?=x)' is not a valid regex (look-around" in bad.stderr


def test_comm_kernels_from_the_run_configuration_and_on_every_command(tmp_path):
    """``[trace] comm_kernels`` in the run configuration does what ``--comm-kernel`` does, and
    report, annotate and compare take the option too: the same hand-counted sgemm union."""
    union = _sgemm_union()
    cfg = tmp_path / "run.toml"
    cfg.write_text('[trace]\ncomm_kernels = ["SGEMM"]\n')
    r = run_cli("breakdown", ALEXNET, "-c", cfg, "-f", "json", "-q")
    assert r.returncode == 0, r.stderr
    assert round(orjson.loads(r.stdout)["ranks"][0]["total"]["exposed_comm_us"] * 1000) == union
    rep = run_cli("report", ALEXNET, "--comm-kernel", "SGEMM", "-f", "json", "-q")
    assert rep.returncode == 0, rep.stderr
    assert round(sum(x["exposed_comm_ms"] for x in orjson.loads(rep.stdout)["steps"]) * 1e6) == union
    cmp = run_cli("compare", ALEXNET, ALEXNET, "--comm-kernel", "SGEMM", "-f", "json", "-q")
    assert cmp.returncode == 0, cmp.stderr
    ann = run_cli("annotate", ALEXNET, "-o", tmp_path / "a.json", "--comm-kernel", "SGEMM", "-q")
    assert ann.returncode == 0, ann.stderr
    for text, message in (('comm_kernels = ["(?<=x)y"]', "[trace] comm_kernels '(?<=x)y' is not a valid regex"),
                          ("comm_kernels = 3", "[trace] comm_kernels = 3 in")):
        cfg.write_text(f"[trace]\n{text}\n")
        bad = run_cli("breakdown", ALEXNET, "-c", cfg)
        assert bad.returncode == 7 and bad.stderr.count("\n") == 1 and message in bad.stderr, bad.stderr


def test_dimension_hint_comes_after_an_explicit_group_description():
    df = pl.DataFrame({
        "pg_desc": ["mesh_tp", None, None, "default_pg"],
        "group_size": [4, 8, 8, 8],
        "stride": [1, 1, 1, 1],
        "p2p_only": [False, False, True, False],
        "hint": ["EP", "EP", None, None],
    })
    got = df.select(collkind.dimension_expr(pl.lit(8), pl.col("hint"))).to_series().to_list()
    assert got == ["TP", "EP", "PP", "DP"]


@pytest.mark.parametrize("world", [None, 1])
def test_single_process_traces_never_get_the_warning(world):
    t = ta.load(ALEXNET)
    meta = t.meta.with_columns(pl.lit(world, pl.Int32).alias("world_size"))
    a = ta.analyze(Trace(events=t.events, meta=meta, sources=t.sources), None)
    assert not any("no communication kernel" in w for w in a.warnings)


def test_unknown_waits_are_not_zero_waits_across_ranks():
    """Ranks 0 and 1 cut down alike, rank 1 missing its first DeepEP kernel: the DeepEP group's
    ranks disagree on the instance count, so its waits are unknown (not 0, not estimated); the
    rank waited on is chosen from the userbuffers waits alone, aligned by hand: instance i,
    wait = min(duration, latest start over the two ranks - own start)."""
    traces = []
    for rank in (0, 1):
        path = sorted(DLRM.glob(f"worker{rank}_*"))[0]
        t = ta.load(path)
        ev = t.events.filter((pl.col("name") != "record_param_comms") & ~pl.col("name").str.starts_with("nccl:"))
        ev = ev.with_columns(
            pl.when(pl.col("name").str.starts_with("ncclKernel_SendRecv")).then(pl.lit(DEEPEP))
            .when(pl.col("name").str.starts_with("ncclKernel_AllReduce")).then(pl.lit(UB_AR))
            .otherwise(pl.col("name")).alias("name")
        )
        if rank == 1:
            first = ev.filter(pl.col("name") == DEEPEP)["start_ns"].min()
            ev = ev.filter(~((pl.col("name") == DEEPEP) & (pl.col("start_ns") == first)))
        traces.append(Trace(events=ev, meta=t.meta, sources=t.sources))
    both = Trace(events=pl.concat([t.events for t in traces]), meta=pl.concat([t.meta for t in traces]), sources=[])
    a = ta.analyze(both)
    c = a.collectives
    ep = c.filter(pl.col("pg_name") == "DeepEP")
    assert ep.height == 9 and ep["wait_ns"].null_count() == 9 and not ep["transfer_estimated"].any()
    ub = c.filter(pl.col("pg_name") == "TE userbuffers").sort("rank", "start_ns")
    starts = {r: ub.filter(pl.col("rank") == r).select("start_ns", "dur_ns").rows() for r in (0, 1)}
    wait = {r: sum(min(d, max(starts[0][i][0], starts[1][i][0]) - s) for i, (s, d) in enumerate(starts[r])) for r in (0, 1)}
    assert ub["wait_ns"].null_count() == 0 and {r: ub.filter(pl.col("rank") == r)["wait_ns"].sum() for r in (0, 1)} == wait
    cr = a.cross_rank.row(0, named=True)
    r = min(wait, key=wait.get)
    assert (cr["waited_on_rank"], cr["waited_on_wait_ns"]) == (r, wait[r])
    # without rank 1's userbuffers kernels no wait is measured at all: no rank is named
    ev1 = traces[1].events.filter(pl.col("name") != UB_AR)
    a = ta.analyze(Trace(events=pl.concat([traces[0].events, ev1]), meta=both.meta, sources=[]))
    assert a.collectives["wait_ns"].null_count() == a.collectives.height
    assert a.cross_rank.row(0, named=True)["waited_on_rank"] is None


def test_a_comm_kernel_pattern_polars_cannot_use_is_refused_with_the_regex_engines_reason():
    from traceanalyzer.classify.labels import check_comm_pattern
    from traceanalyzer.errors import ConfigError

    for ok in ("SGEMM", "^nccl", "(?i)all_?reduce"):
        check_comm_pattern(ok)
    # the reasons are the Rust regex crate's (polars' engine): no look-around, no back-references
    for bad, why in [("(?=x)", "look-around, including look-ahead and look-behind, is not supported"),
                     ("(", "unclosed group"), ("\\1", "backreferences are not supported")]:
        with pytest.raises(ConfigError) as e:
            check_comm_pattern(bad)
        assert e.value.message == f"`comm_kernels` {bad!r} is not a valid regex ({why})"
    # a regex beyond the compiled-size limit fails without a parser message
    with pytest.raises(ConfigError) as e:
        check_comm_pattern("a{100000}{100000}")
    assert e.value.message == "`comm_kernels` 'a{100000}{100000}' is not a valid regex (parse error)"
