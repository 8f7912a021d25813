"""Activation recompute (checkpointing), marked on the host and carried to the GPU.

A host op is **recomputed** when one of these signals holds (Kineto host events as PyTorch
records them):

1. *forward-style op inside backward*: a ``cpu_op`` with an autograd ``Sequence number``,
   ``Fwd thread id`` 0, not itself an autograd node (``autograd::*`` / ``*Backward*``), nested
   under an ``autograd::engine::evaluate_function`` range on its thread. Ops run by the autograd
   engine normally carry no sequence number (grad mode is off), so this catches reentrant,
   non-reentrant (``use_reentrant=False``, FSDP ``checkpoint_wrapper``, Megatron
   ``CheckpointWithoutOutput``) and selective checkpointing alike.
2. *checkpoint node*: everything nested under ``CheckpointFunctionBackward`` (torch reentrant,
   Megatron) or ``_CheckpointFunctionBackward`` (Transformer Engine), or under a host range whose
   name matches a user-given pattern (e.g. NVTX ranges from Nsight, which the Nsight parser
   emits as ``annotation`` events), except the nested backward nodes (``evaluate_function`` /
   ``*Backward*`` ranges inside it) and everything under those.

Every op and runtime call nested under a recomputed op is recomputed too, and so is the GPU work
they launched (joined by correlation id and by External id, in :mod:`.labels`).

Not recompute, although inside such a region: **selective-AC cache hits** (an op whose
descendants are only ``aten::detach`` / ``detach`` and an empty ``PythonDispatchMode``: the
policy's saved result is handed back, nothing runs) and bare ``aten::detach`` calls (the
checkpoint detaching its inputs). A recomputed op whose only child is ``aten::detach`` (the
non-reentrant pack hook saving its output, e.g. ``aten::gelu``) did run and counts.

Sequence numbers are per thread (recompute on the autograd thread reuses numbers that the
forward thread also used), so the distinct count of recomputed forward ops is keyed by
``(rank, pid, tid, seq)``.

Nesting is computed on the pre-order of each thread's host ranges (sorted by start, longest
first): the descendants of a range are the contiguous rows after it that start before it ends,
so "everything under X" is a difference-array cover over row positions. No Python loop.
"""

from __future__ import annotations

import polars as pl
from traceanalyzer.queries import query_engine

EVALUATE_FUNCTION = "autograd::engine::evaluate_function"
CHECKPOINT_NODES = r"^_?CheckpointFunctionBackward$"
DETACHISH = ["aten::detach", "detach", "PythonDispatchMode", "aten::alias"]
HOST_KINDS = ["cpu_op", "annotation", "runtime"]
THREAD = ["rank", "pid", "tid"]
_HOST_COLS = [*THREAD, "kind", "name", "start_ns", "end_ns", "seq", "fwd_tid", "external_id", "correlation"]


def host_tree(events: pl.DataFrame | pl.LazyFrame, threads: pl.DataFrame | pl.LazyFrame | None = None) -> pl.LazyFrame:
    """Host ranges in per-thread pre-order with ``pos`` (row) and ``hi`` (last descendant row).

    Columns: ``pos, rank, pid, tid, kind, name, start_ns, end_ns, seq, fwd_tid, external_id,
    correlation, hi``. ``threads``: a frame of ``rank, pid, tid``; only the ranges of those
    threads (default: every host thread). Equal ranges of one thread keep their order in
    ``events``.

    The order and the nesting are computed on integers alone (row number, thread number in
    ``rank, pid, tid`` order, times): sorting ~300k ranges by their text ``pid``/``tid`` and
    carrying every column through three sorts cost ~140 MiB, this ~40 MiB. The other columns
    are gathered from ``events`` once, in tree order. Pass ``events`` as a DataFrame for that;
    a LazyFrame is first collected to its host ranges."""
    if isinstance(events, pl.LazyFrame):
        ev = events.filter(pl.col("kind").is_in(HOST_KINDS))
        if threads is not None:
            ev = ev.join(threads.lazy(), on=THREAD, how="semi")
            threads = None
        events = ev.select(_HOST_COLS).collect(engine=query_engine())
    rows = events.lazy().select(*THREAD, "kind", "start_ns", "end_ns").with_row_index("__row").filter(pl.col("kind").is_in(HOST_KINDS))
    # thread number: the rank of (rank, pid, tid) in sort order; the join keeps the given threads only
    every = threads is None
    numbers = (rows.select(THREAD) if every else threads.lazy().select(THREAD)).unique().sort(THREAD).with_row_index("__t")
    order = _preorder(rows.join(numbers, on=THREAD, how="inner", nulls_equal=every).select("__row", "__t", "start_ns", "end_ns").collect(engine=query_engine()))
    order = order.with_row_index("pos").with_columns(pl.col("pos").cast(pl.Int64))
    hi = _last_descendants(order)
    wide = events.select(pl.col(_HOST_COLS).gather(order.get_column("__row")))
    return pl.concat([order.select("pos"), wide, hi], how="horizontal").lazy()


def _preorder(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (``__row, __t, start_ns, end_ns``) sorted by thread, start, end descending and
    row: the threads' ranges in pre-order.

    Rows mostly come in that order already (a thread's ranges in the order they started): then
    nothing is sorted. Else, where the times and thread numbers fit one integer key
    ``__t * width + (start - lo)``, two stable single-column sorts (end descending, then the
    key): polars sorts several columns by encoding rows, 2-3 times the CPU (9 vs 4 ms on the
    70,000 ranges of a 54 MB trace); where it does not fit, that sort."""
    t, start, end, row = (pl.col(c) for c in ("__t", "start_ns", "end_ns", "__row"))
    nt, ns, ne, nr = (c.shift(-1) for c in (t, start, end, row))
    in_order = (nt > t) | ((nt == t) & ((ns > start) | ((ns == start) & ((ne < end) | ((ne == end) & (nr > row))))))
    if rows.select(in_order.fill_null(True).all()).item():
        return rows
    s, e = rows.get_column("start_ns"), rows.get_column("end_ns")
    if not (s.null_count() or e.null_count()):
        lo = min(s.min(), e.min())
        width = max(s.max(), e.max()) - lo + 1
        if (rows.get_column("__t").max() + 1) * width < 2**62:
            by_row = rows if rows.get_column("__row").is_sorted() else rows.sort("__row")
            return (
                by_row.sort("end_ns", descending=True, maintain_order=True)
                .with_columns((t.cast(pl.Int64) * width + (start - lo)).alias("__key"))
                .sort("__key", maintain_order=True)
                .drop("__key")
            )
    return rows.sort(["__t", "start_ns", "end_ns", "__row"], descending=[False, False, True, False])


def _last_descendants(order: pl.DataFrame) -> pl.DataFrame:
    """``hi`` of each row of ``order`` (``pos, __t, start_ns, end_ns`` in pre-order): the last row
    of its thread that starts before it ends, at least the row itself.

    The rows are sorted by (thread, start), so one integer key ``__t * width + (start - lo)``
    (``width`` the span of the times) is sorted too, and the last row that starts before the end
    is one binary search of ``__t * width + (end - 1 - lo)``: a range of length 0 finds a row
    before itself (kept as itself). When that key could overflow (a thread count times a time
    span beyond 2^62) or a time is missing, the same answer by an as-of join per thread."""
    start, end, t = order.get_column("start_ns"), order.get_column("end_ns"), order.get_column("__t").cast(pl.Int64)
    pos = order.get_column("pos")
    if order.height and not (start.null_count() or end.null_count()):
        lo = min(start.min(), end.min())
        width = max(start.max(), end.max()) - lo + 1
        if (t.max() + 1) * width < 2**62:
            keys = t * width + (start - lo)
            last = keys.search_sorted(t * width + (end - 1 - lo), side="right").cast(pl.Int64) - 1
            return pl.DataFrame({"hi": pl.select(pl.max_horizontal(pos, last)).to_series()})
    h = order.lazy()
    last = h.group_by("__t", "start_ns").agg(pl.col("pos").max().alias("hi")).sort("start_ns")
    return (
        h.select("pos", "__t", (pl.col("end_ns") - 1).alias("__q"))
        .sort("__q")
        .join_asof(last, left_on="__q", right_on="start_ns", by="__t", strategy="backward", check_sortedness=False)
        .sort("pos")
        .select(pl.max_horizontal("pos", pl.col("hi").fill_null(pl.col("pos"))).alias("hi"))
        .collect(engine=query_engine())
    )


def cover(tree: pl.DataFrame, mask: pl.Expr, name: str, strict: bool = False) -> pl.DataFrame:
    """Add boolean ``name``: the row lies under (or is, unless ``strict``) a row where ``mask`` holds.

    ``tree`` is a materialised :func:`host_tree` frame (sorted by ``pos``, ``pos`` the row
    number). A row at ``p`` is covered when more marked ranges open at or before ``p`` (at
    ``pos``, or ``pos + 1`` when ``strict``) than close before it (at ``hi + 1``): two binary
    searches over the marked rows' bounds, no join with or sort of the tree."""
    marks = tree.lazy().filter(mask).select("pos", "hi").collect(engine=query_engine())
    opens = (marks.get_column("pos") + (1 if strict else 0)).sort()
    closes = (marks.get_column("hi") + 1).sort()
    pos = tree.get_column("pos")
    depth = opens.search_sorted(pos, side="right").cast(pl.Int64) - closes.search_sorted(pos, side="right").cast(pl.Int64)
    return tree.with_columns((depth > 0).alias(name))


def _is_backward_node() -> pl.Expr:
    return pl.col("name").str.starts_with("autograd::") | pl.col("name").str.contains("Backward")


def recompute_threads(events: pl.LazyFrame, pattern: str | None = None) -> pl.LazyFrame:
    """Host threads that can hold recompute: those with a backward node or a checkpoint (or
    ``pattern``) range (``rank, pid, tid``)."""
    region_re = CHECKPOINT_NODES if not pattern else f"(?:{CHECKPOINT_NODES})|(?:{pattern})"
    is_region = pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("name").str.contains(region_re)
    is_eval = pl.col("name").str.starts_with(EVALUATE_FUNCTION)
    return events.filter(pl.col("kind").is_in(HOST_KINDS) & (is_eval | is_region)).select(THREAD).unique()


def recompute_ops(events: pl.DataFrame | pl.LazyFrame, pattern: str | None = None, tree: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every recomputed host range (ops, annotations, runtime calls).

    Columns: ``rank, pid, tid, kind, name, start_ns, end_ns, seq, fwd_tid, external_id,
    correlation, pos, top_level, root_pos, region, region_start_ns``. ``top_level``: no recomputed ancestor (the
    ops a user wrote in the checkpointed function); ``root_pos``: the top-level op it belongs to;
    ``region``: name of the innermost ``evaluate_function`` (or checkpoint/pattern range) holding
    the top-level op. ``pattern``: optional regex; host ranges matching it are treated like
    ``CheckpointFunctionBackward``. ``tree``: the host call tree (:func:`host_tree`) when
    already built; it must hold at least the threads of :func:`recompute_threads`.
    """
    region_re = CHECKPOINT_NODES if not pattern else f"(?:{CHECKPOINT_NODES})|(?:{pattern})"
    is_region = pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("name").str.contains(region_re)
    is_eval = pl.col("name").str.starts_with(EVALUATE_FUNCTION)
    # recompute needs a backward node or a checkpoint range on the same thread: build the call
    # tree of those threads only (the forward thread of a GPU job, most of its events, drops out)
    if tree is None:
        tree = host_tree(events, recompute_threads(events.lazy(), pattern)).collect(engine=query_engine())
    candidate = (
        (pl.col("kind") == "cpu_op")
        & pl.col("seq").is_not_null()
        & (pl.col("fwd_tid") == 0)
        & ~_is_backward_node()
    )
    # detach-only subtrees: SAC cache hits (the saved tensor is handed back through the
    # dispatch mode: only detach and an empty PythonDispatchMode below the op) and bare
    # detaches (the checkpoint detaching its inputs, the pack hook detaching saved outputs)
    detachish = pl.col("name").is_in(DETACHISH)
    t = tree.with_columns(
        detachish.cast(pl.Int64).cum_sum().alias("__cd"),
        (pl.col("name") == "PythonDispatchMode").cast(pl.Int64).cum_sum().alias("__cm"),
    )
    n_desc = pl.col("hi") - pl.col("pos")
    last_row = pl.col("pos").search_sorted(pl.col("hi"))  # the row of the last descendant (pos is the row number)
    t = t.with_columns(
        (
            detachish
            | (
                (n_desc > 0)
                & (pl.col("__cd").gather(last_row) - pl.col("__cd") == n_desc)
                & (pl.col("__cm").gather(last_row) - pl.col("__cm") > 0)
            )
        ).alias("__noop")
    )
    t = cover(t, is_eval, "__in_eval", strict=True)
    t = cover(t, is_region, "__in_region", strict=True)
    # nested backward nodes strictly inside a region (their subtree is real backward work)
    t = cover(t, pl.col("__in_region") & (is_eval | _is_backward_node()) & ~is_region, "__in_nested_bwd")
    t = cover(t, pl.col("__noop"), "__in_noop")
    sig1 = candidate & pl.col("__in_eval")
    sig2 = pl.col("__in_region") & ~pl.col("__in_nested_bwd") & ~is_region
    t = cover(t, (sig1 | sig2) & ~pl.col("__noop"), "__rc")
    t = t.with_columns((pl.col("__rc") & ~pl.col("__in_noop")).alias("recompute"))
    t = cover(t, pl.col("recompute"), "__under_rc", strict=True)
    t = t.lazy()
    marked = t.filter(pl.col("recompute")).with_columns((~pl.col("__under_rc")).alias("top_level"))
    roots = marked.filter(pl.col("top_level")).select(*THREAD, pl.col("pos").alias("root_pos"))
    containers = (
        t.filter(is_eval | is_region)
        .select(*THREAD, pl.col("pos").alias("rpos"), pl.col("hi").alias("rhi"), pl.col("name").alias("region"), pl.col("start_ns").alias("region_start_ns"))
        .sort("rpos")
    )
    tops = (
        marked.filter(pl.col("top_level"))
        .select(*THREAD, "pos")
        .sort("pos")
        .join_asof(containers, left_on="pos", right_on="rpos", by=THREAD, strategy="backward", allow_exact_matches=False, check_sortedness=False)
        .select(
            "pos",
            pl.when(pl.col("rhi") >= pl.col("pos")).then(pl.col("region")).alias("region"),
            pl.when(pl.col("rhi") >= pl.col("pos")).then(pl.col("region_start_ns")).alias("region_start_ns"),
        )
    )
    out = (
        marked.sort("pos")
        .join_asof(roots.sort("root_pos"), left_on="pos", right_on="root_pos", by=THREAD, strategy="backward", check_sortedness=False)
        .join(tops.rename({"pos": "root_pos"}), on="root_pos", how="left")
        .select(*_HOST_COLS, "pos", "top_level", "root_pos", "region", "region_start_ns")
        .sort("pos")
    )
    return out.collect(engine=query_engine())


def recompute_links(ops: pl.DataFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(external ids, correlations) of recomputed host work, each with the top-level op's
    ``root_pos``: frames ``rank, external_id, root_pos`` and ``rank, correlation, root_pos``."""
    lz = ops.lazy()
    ext = (
        lz.filter(pl.col("external_id").is_not_null() & (pl.col("kind") != "runtime"))
        .group_by("rank", "external_id")
        .agg(pl.col("root_pos").first())
    )
    corr = (
        lz.filter(pl.col("correlation").is_not_null() & (pl.col("kind") == "runtime"))
        .group_by("rank", "correlation")
        .agg(pl.col("root_pos").first())
    )
    return ext, corr


def ops_by_name(ops: pl.DataFrame, gpu: pl.DataFrame) -> pl.DataFrame:
    """Recomputed top-level ops by name, per rank: ``rank, name, count, gpu_ns``.

    ``gpu``: labelled GPU work with ``rc_root`` (the top-level op that launched it, see
    :func:`traceanalyzer.classify.labels.label_gpu`); ``gpu_ns`` sums kernel durations (not a
    union: kernels of one op on two streams both count).
    """
    tops = ops.filter(pl.col("top_level")).select("rank", "name", pl.col("pos").alias("rc_root"))
    if "rc_root" in gpu.columns:
        g = (
            gpu.filter(pl.col("rc_root").is_not_null())
            .group_by("rank", "rc_root")
            .agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("gpu_ns"))
        )
    else:
        g = pl.DataFrame(schema={"rank": pl.Int32, "rc_root": pl.Int64, "gpu_ns": pl.Int64})
    return (
        tops.join(g, on=["rank", "rc_root"], how="left")
        .group_by("rank", "name")
        .agg(pl.len().alias("count"), pl.col("gpu_ns").fill_null(0).sum())
        .sort(["rank", "gpu_ns", "count", "name"], descending=[False, True, True, False])
    )
