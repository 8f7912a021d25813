"""Op-level recompute marking against the torch-cpu ground truth (SOURCE.md) and an independent
plain-Python walk of the raw JSON (tests/rc_reference.py)."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.recompute import ops_by_name, recompute_ops

import rc_reference as ref
from conftest import DEMO, DLRM, FIXTURES, TRACES, real_gpu_traces

CPU = TRACES / "torch-cpu"
needs_cpu = pytest.mark.skipif(not CPU.exists(), reason=f"torch-cpu traces not found at {CPU}")


def _top_by_step(path):
    t = ta.load(path)
    ops = recompute_ops(t.events)
    steps = (
        t.events.filter((pl.col("kind") == "annotation") & pl.col("name").str.starts_with("ProfilerStep#"))
        .select(pl.col("name").alias("step"), "start_ns")
        .sort("start_ns")
    )
    top = ops.filter("top_level").sort("start_ns").join_asof(steps, on="start_ns", strategy="backward")
    return ops, top


@needs_cpu
def test_mixed_checkpointing_gives_the_known_counts_per_region():
    ops, top = _top_by_step(CPU / "cpu_ckpt_mixed.pt.trace.json.gz")
    s3 = top.filter(pl.col("step") == "ProfilerStep#3")
    by_region = dict(s3.group_by("region").len().iter_rows())
    # SOURCE.md: reentrant block1 = 19 top-level ops, non-reentrant block2 = 18
    assert by_region == {"CheckpointFunctionBackward": 19, "autograd::engine::evaluate_function: AddmmBackward0": 18}
    reent = s3.filter(pl.col("region") == "CheckpointFunctionBackward").sort("start_ns")
    assert reent["seq"].min() == 1161 and reent["seq"].max() == 1191
    nonre = s3.filter(pl.col("region") != "CheckpointFunctionBackward").sort("start_ns")
    assert nonre["seq"].to_list()[0] == 1132 and nonre["seq"].max() == 1158  # 1159-1160 nested in the last linear
    assert nonre["name"].to_list() == [
        "aten::layer_norm", "aten::linear", "aten::split", "aten::view", "aten::transpose", "aten::view",
        "aten::transpose", "aten::view", "aten::transpose", "aten::scaled_dot_product_attention",
        "aten::transpose", "aten::reshape", "aten::linear", "aten::add", "aten::layer_norm", "aten::linear",
        "aten::gelu", "aten::linear",
    ]
    # the real addmm backward (aten::t, aten::mm) and the nested backward nodes are not recompute
    assert not ops["name"].str.contains("Backward").any()
    assert "aten::mm" not in s3["name"].to_list()


@needs_cpu
@pytest.mark.parametrize("name", ["cpu_ckpt_mixed", "cpu_ckpt_selective", "cpu_ckpt_mixed_stack", "cpu_gloo_ddp_rank0", "cpu_no_ckpt"])
def test_marking_equals_an_independent_walk_of_the_raw_json(name):
    path = CPU / f"{name}.pt.trace.json.gz"
    every, top = ref.recomputed(ref.load(path))
    ops = recompute_ops(ta.load(path).events)
    base = ta.load(path).meta["base_time_ns"][0] or 0
    if name == "cpu_no_ckpt":
        assert not every and ops.height == 0
    for got, want in ((ops, every), (ops.filter("top_level"), top)):
        want = sorted((base + n["ts"], n["tid"], n["name"]) for n in want)
        got = sorted(zip(got["start_ns"], got["tid"], got["name"]))
        assert len(got) == len(want)
        # same nodes; start times agree to the parser's float rounding (<= 2 ns)
        assert [g[1:] for g in got] == [w[1:] for w in want]
        assert max((abs(g[0] - w[0]) for g, w in zip(got, want)), default=0) <= 2


@needs_cpu
def test_selective_checkpointing_two_regions_per_step_and_cache_hits_excluded():
    path = CPU / "cpu_ckpt_selective.pt.trace.json.gz"
    ops, top = _top_by_step(path)
    s3 = top.filter(pl.col("step") == "ProfilerStep#3")
    assert s3["region_start_ns"].n_unique() == 2
    assert set(s3["region"]) == {"autograd::engine::evaluate_function: AddmmBackward0"}
    # cache hits: forward-style ops (seq, Fwd thread id 0) whose subtree is only detach and an empty
    # PythonDispatchMode. They exist in the recompute regions and none is marked.
    doc = ref.load(path)
    hits = [
        n for ns in ref.trees(doc).values() for n in ns
        if n["args"].get("Sequence number") is not None and n["args"].get("Fwd thread id") == 0
        and ref.noop(n) and any(p["name"].startswith("autograd::engine::evaluate_function") for p in ref.ancestors(n))
    ]
    # 4 addmm (qkv, proj, fc1, fc2) x 2 regions x 2 steps, policy MUST_SAVE
    assert len(hits) == 16 and {n["name"] for n in hits} == {"aten::addmm"}
    base = ta.load(path).meta["base_time_ns"][0] or 0
    marked = ops.select("start_ns", "name")
    for n in hits:
        near = marked.filter((pl.col("name") == n["name"]) & ((pl.col("start_ns") - (base + n["ts"])).abs() <= 2))
        assert near.height == 0


@needs_cpu
def test_no_checkpointing_means_zero_recompute_ops():
    assert recompute_ops(ta.load(CPU / "cpu_no_ckpt.pt.trace.json.gz").events).height == 0


def test_mi300x_recompute_matches_the_independent_count():
    doc = ref.load(DEMO)
    every, top = ref.recomputed(doc)
    t = ta.load(DEMO)
    ops = recompute_ops(t.events)
    seq_ops = ops.filter((pl.col("kind") == "cpu_op") & pl.col("seq").is_not_null() & (pl.col("fwd_tid") == 0))
    assert seq_ops.height == 438 and seq_ops["tid"].unique().to_list() == ["639"]  # pt_autograd_0
    assert ops.height == len(every) == 2037 and ops["top_level"].sum() == len(top) == 267
    gpu = label_gpu(t.events, ops)
    kernel_ns = gpu.filter(pl.col("cls") == "recompute").select((pl.col("end_ns") - pl.col("start_ns")).sum()).item()
    assert kernel_ns == ref.recompute_gpu_ns(doc) == 4_122_223
    by_name = ops_by_name(ops, gpu)
    assert by_name["gpu_ns"].sum() == kernel_ns
    assert by_name.filter(pl.col("name") == "aten::conv2d")["count"].item() == 57


def test_traces_without_checkpointing_report_exactly_zero():
    paths = [DLRM, FIXTURES / "kineto" / "v100_resnet50_legacy2021.json.gz", FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz"]
    for p in paths:
        a = ta.analyze(ta.load(p))
        assert a.steps["recompute_ns"].sum() == 0, p
        assert recompute_ops(a.trace.events).height == 0, p


def test_user_pattern_marks_an_annotation_range_as_recompute():
    # an NVTX-style range (as the Nsight parser emits) around work on a thread: everything inside
    # is recompute, except nested backward nodes
    ev = pl.DataFrame(
        {
            "rank": [0] * 5,
            "kind": ["annotation", "runtime", "cpu_op", "runtime", "runtime"],
            "pid": ["1"] * 5,
            "tid": ["7"] * 5,
            "name": ["my_recompute", "cudaLaunchKernel", "autograd::engine::evaluate_function: MmBackward0", "cudaLaunchKernel", "cudaLaunchKernel"],
            "start_ns": [100, 110, 200, 210, 400],
            "end_ns": [300, 120, 290, 220, 410],
            "correlation": [None, 1, None, 2, 3],
        }
    )
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    ev = conform(ev, EVENT_SCHEMA)
    assert recompute_ops(ev).height == 0
    ops = recompute_ops(ev, pattern="^my_recompute$")
    assert ops.select("name", "correlation").rows() == [("cudaLaunchKernel", 1)]


def _tree_reference(events: pl.DataFrame) -> list[tuple]:
    """Plain-Python host call tree: host ranges per thread in pre-order (start, longest first,
    then file order), each with its row in ``events`` and the pre-order row of its last
    descendant (the last range of the thread that starts before it ends)."""
    rows = [
        (r["rank"], r["pid"], r["tid"], r["start_ns"], -r["end_ns"], i, r["end_ns"])
        for i, r in enumerate(events.iter_rows(named=True))
        if r["kind"] in ("cpu_op", "annotation", "runtime")
    ]
    rows.sort(key=lambda r: r[:6])
    out = []
    for p, (rank, pid, tid, start, _, i, end) in enumerate(rows):
        hi = p
        while hi + 1 < len(rows) and rows[hi + 1][:3] == (rank, pid, tid) and rows[hi + 1][3] < end:
            hi += 1
        out.append((p, i, hi))
    return out


@needs_cpu
def test_host_tree_matches_a_plain_python_walk_and_keeps_file_order_on_ties():
    from traceanalyzer.classify.recompute import host_tree

    ev = ta.load(CPU / "cpu_ckpt_selective.pt.trace.json.gz").events
    # a copy of one range on its thread: a tie that only the file order breaks
    dup = ev.filter(pl.col("kind") == "cpu_op").head(1).with_columns(pl.lit("tie_copy").alias("name"))
    ev = pl.concat([ev, dup])
    want = _tree_reference(ev)
    tree = host_tree(ev).collect()
    assert tree.height == len(want) > 1000
    assert tree["pos"].to_list() == [p for p, _, _ in want]
    assert tree["hi"].to_list() == [hi for _, _, hi in want]
    rows = [i for _, i, _ in want]
    gathered = ev.with_row_index("__i").filter(pl.col("__i").is_in(rows))
    expect = pl.DataFrame({"__i": rows}, schema={"__i": pl.UInt32}).join(gathered, on="__i", how="left", maintain_order="left")
    assert tree.drop("pos", "hi").equals(expect.select(tree.drop("pos", "hi").columns))
    copy_pos = tree.filter(pl.col("name") == "tie_copy")["pos"].item()
    assert tree.row(copy_pos - 1, named=True)["start_ns"] == tree.row(copy_pos, named=True)["start_ns"]  # right after its twin
    # the same tree for a subset of threads as from a LazyFrame already cut to them
    threads = ev.filter(pl.col("kind") == "runtime").select("rank", "pid", "tid").unique()
    lazy = host_tree(ev.lazy().join(threads.lazy(), on=["rank", "pid", "tid"], how="semi")).collect()
    assert host_tree(ev, threads).collect().equals(lazy)


def test_cover_marks_the_rows_under_each_marked_range():
    from traceanalyzer.classify.recompute import cover

    # pos 0..7; ranges: 0 holds 1..3, 4 holds 5, 6 and 7 are leaves
    tree = pl.DataFrame({"pos": list(range(8)), "hi": [3, 1, 3, 3, 5, 5, 6, 7], "m": [True, False, False, False, True, False, False, True]})
    marks = [(p, h) for p, h, m in zip(tree["pos"], tree["hi"], tree["m"]) if m]
    for strict in (False, True):
        want = [any(p + strict <= q <= h for p, h in marks) for q in range(8)]
        assert cover(tree, pl.col("m"), "c", strict=strict)["c"].to_list() == want
    assert not cover(tree, pl.lit(False), "c")["c"].any()


def test_recompute_links_of_a_user_range_by_hand():
    from traceanalyzer.classify.labels import recompute_links
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    # one thread; its host ranges in pre-order (by start): 0 my_recompute [100, 300), 1 a launch
    # (correlation 1), 2 aten::mm (External id 42), 3 a backward node [200, 290) holding 4 a launch
    # (correlation 2), 5 a launch after the range (correlation 3)
    ev = conform(pl.DataFrame({
        "rank": [0] * 6,
        "kind": ["annotation", "runtime", "cpu_op", "cpu_op", "runtime", "runtime"],
        "pid": ["1"] * 6,
        "tid": ["7"] * 6,
        "name": ["my_recompute", "cudaLaunchKernel", "aten::mm", "autograd::engine::evaluate_function: MmBackward0",
                 "cudaLaunchKernel", "cudaLaunchKernel"],
        "start_ns": [100, 110, 130, 200, 210, 400],
        "end_ns": [300, 120, 150, 290, 220, 410],
        "correlation": [None, 1, None, None, 2, 3],
        "external_id": [None, None, 42, None, None, None],
    }), EVENT_SCHEMA)
    # no checkpointing and no range pattern: nothing is recomputed
    ext, corr = recompute_links(ev.lazy())
    assert ext.collect().height == 0 and corr.collect().height == 0
    # the range named: the launch (pos 1) and aten::mm (pos 2) inside it are top-level recomputed
    # ops, each its own root; the backward node and its launch are not recompute, nor is the
    # launch after the range
    ext, corr = recompute_links(ev.lazy(), "^my_recompute$")
    assert ext.collect().rows() == [(0, 42, 2)]
    assert corr.collect().rows() == [(0, 1, 1)]
    assert ext.collect_schema().names() == ["rank", "external_id", "root_pos"]
    assert corr.collect_schema().names() == ["rank", "correlation", "root_pos"]


def test_a_kernel_linked_by_correlation_only_gets_its_recomputed_root():
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    # host, one thread, pre-order: 0 my_recompute [100, 300), 1 a launch (correlation 1), 2 aten::mm
    # (External id 42), 3 a launch (correlation 4), all inside the range, 4 a launch after it
    # (correlation 3). Kernels: one launched by correlation 1 (no External id), one carrying
    # External id 42 (no correlation), an NCCL kernel launched by correlation 4, an NCCL kernel
    # launched after the range, a kernel without a name launched by correlation 1
    ev = conform(pl.DataFrame({
        "rank": [0] * 10,
        "kind": ["annotation", "runtime", "cpu_op", "runtime", "runtime", "kernel", "kernel", "kernel", "kernel", "kernel"],
        "pid": ["1"] * 5 + ["0"] * 5,
        "tid": ["7"] * 5 + ["9"] * 5,
        "name": ["my_recompute", "cudaLaunchKernel", "aten::mm", "cudaLaunchKernel", "cudaLaunchKernel",
                 "k_by_corr", "k_by_ext", "ncclDevKernel_AllReduce", "ncclDevKernel_AllGather", None],
        "start_ns": [100, 110, 130, 160, 400, 500, 600, 700, 800, 900],
        "end_ns": [300, 120, 150, 170, 410, 550, 650, 750, 850, 950],
        "correlation": [None, 1, None, 4, 3, 1, None, 4, 3, 1],
        "external_id": [None, None, 42, None, None, None, 42, None, None, None],
    }), EVENT_SCHEMA)
    gpu = label_gpu(ev, pattern="^my_recompute$").sort("start_ns")
    assert gpu["name"].to_list() == ["k_by_corr", "k_by_ext", "ncclDevKernel_AllReduce", "ncclDevKernel_AllGather", None]
    # communication wins over recompute; a kernel without a name is no communication
    assert gpu["cls"].to_list() == ["recompute", "recompute", "comm", "comm", "recompute"]
    assert gpu["comm_in_recompute"].to_list() == [False, False, True, False, False]
    assert gpu["rc_root"].to_list() == [1, 2, 3, None, 1]


@pytest.mark.parametrize("far", [False, True])
def test_last_descendant_by_hand(far):
    from traceanalyzer.classify.recompute import _last_descendants

    # two threads in pre-order (start ascending, longest first). Thread 0: A [0,100) holds
    # B [0,40) (same start: B comes after A), D [40,90) and C [40,40) (length 0, after D);
    # E [100,120) starts at A's end; thread 1: F [5,10), G [10,20) touching but outside F.
    # ``far``: thread 1's times 2^61 ns later, so the one-key search would overflow and the
    # as-of join answers
    shift = 2**61 if far else 0
    order = pl.DataFrame({
        "pos": [0, 1, 2, 3, 4, 5, 6],
        "__t": pl.Series([0, 0, 0, 0, 0, 1, 1], dtype=pl.UInt32),
        "start_ns": [0, 0, 40, 40, 100, 5 + shift, 10 + shift],
        "end_ns": [100, 40, 90, 40, 120, 10 + shift, 20 + shift],
    })
    # A: rows starting before 100 on thread 0 -> up to D (3); B: before 40 -> 1 (B itself);
    # D [40,90): rows starting before 90 -> 3; C [40,40): none after it -> itself; F: G starts at
    # its end -> itself
    assert _last_descendants(order).get_column("hi").to_list() == [3, 1, 3, 3, 4, 5, 6]


@pytest.mark.parametrize("far", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_preorder_by_hand(far, shuffle):
    from traceanalyzer.classify.recompute import _preorder

    # thread 0: rows 0..4; ranges [10,50) row 3 and [10,50) row 1 (equal: by row), [10,90) row 4
    # (same start, longer: first), [0,5) row 2 (earliest), [60,70) row 0; thread 1: [1,2) row 5.
    # ``far``: thread 1 2^61 ns later (the one-key sort would overflow: the multi-column sort)
    shift = 2**61 if far else 0
    rows = pl.DataFrame({
        "__row": pl.Series([0, 1, 2, 3, 4, 5], dtype=pl.UInt32),
        "__t": pl.Series([0, 0, 0, 0, 0, 1], dtype=pl.UInt32),
        "start_ns": [60, 10, 0, 10, 10, 1 + shift],
        "end_ns": [70, 50, 5, 50, 90, 2 + shift],
    })
    if shuffle:
        rows = rows.sample(fraction=1.0, shuffle=True, seed=3)
    got = _preorder(rows)
    assert got.get_column("__row").to_list() == [2, 4, 1, 3, 0, 5]
    # already in pre-order: given back as it is
    assert _preorder(got).get_column("__row").to_list() == [2, 4, 1, 3, 0, 5]
