"""Communication: what each collective kernel is, and where its time went.

For every communication kernel (``cls == "comm"`` in :mod:`.labels`):

* **type** (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``send_recv``,
  ``broadcast``, ``reduce``, ``gather``, ``scatter``, ``barrier``, ``unknown``) from, best first:
  the kernel's own ``Collective name`` arg, the linked ``record_param_comms`` (same External id,
  or the one enclosing the launch call on the host thread), the enclosing ``nccl:*`` / ``gloo:*``
  annotation or user annotation naming ``dispatch`` / ``combine`` (MoE token exchange:
  ``all_to_all``), the NCCL kernel name (``ncclKernel_AllReduce_...``,
  ``ncclDevKernel_AllGather_...``, ``ncclKernel_SendRecv_...``; ``ncclDevKernel_Generic`` says
  nothing), and last the library table :data:`traceanalyzer.classify.labels.COMM_LIBRARIES`
  (DeepEP ``dispatch``/``combine`` are ``all_to_all``, userbuffers ``..._ag`` ``all_gather``...).
* **bytes** = max(in, out) elements × element size (the nccl-tests "size": the full buffer of an
  all-gather / reduce-scatter). Elements from ``In/Out msg nelems``, else the product of the
  first ``Input Dims`` of ``record_param_comms``; element size from ``dtype``, else from the
  kernel name's type token (not for SendRecv, whose ``int8_t`` is NCCL's byte transport).
* **process group** (name, description, size, ranks) from the kernel / ``record_param_comms``
  args, completed from ``distributedInfo.pg_config``; kernels with no group info get group
  ``"default"`` sized to the world, except those of a library in the table other than NCCL
  (DeepEP, userbuffers, ...), which get a group named after the library (size unknown).
* **dimension** (TP/DP/PP/CP/EP/unknown): see :func:`.collkind.dimension_expr`.

**Wait vs transfer.** With several ranks of a group loaded, instance *i* of the group (its
``Seq`` arg when present, else the *i*-th collective kernel of the group on each rank, by
start time) is aligned across ranks: ``transfer = end − latest start over ranks`` (clamped to the
kernel), ``wait = duration − transfer``. A group whose ranks disagree on the instance count is
not aligned. Otherwise transfer is estimated as ``bytes × f / bus_bw`` (``f`` = 2(n−1)/n for
all-reduce, (n−1)/n for all-gather / reduce-scatter / all-to-all, 1 otherwise: nccl-tests'
bus-bandwidth factors) and flagged ``transfer_estimated``. A kernel with no byte count (DeepEP,
userbuffers, custom all-reduce: nothing records their size) that cannot be aligned has
``wait_ns`` / ``transfer_ns`` null: unknown, not estimated.

**Exposed / overlapped per type, group and dimension** come from one boundary sweep
(:func:`traceanalyzer.classify.intervals.segments`) with one extra class per type / group /
dimension, so they partition the step's ``exposed_comm`` (and ``overlapped_comm``) exactly: a
segment where communication of two different keys runs at once is counted under ``concurrent``.
"""

from __future__ import annotations

import orjson
import polars as pl

from traceanalyzer.buckets import COMM_CONCURRENT
from traceanalyzer.classify.collkind import coll_type_expr, dimension_expr, dims_nelems, dtype_size, kernel_dtype, kernel_type
from traceanalyzer.classify.intervals import segments
from traceanalyzer.classify.labels import CLASSES, library_expr
from traceanalyzer.classify.names import name_columns
from traceanalyzer.classify.recompute import THREAD, host_tree
from traceanalyzer.classify.rowbatches import BATCH_ROWS, RUN_ROWS, batches, batches_of, chunks, rank_runs
from traceanalyzer.queries import query_engine

DEFAULT_BUS_BW_GBPS = 100.0
#: how the warnings about collectives' wait/transfer split begin (a view that does not show the split leaves them out)
TRANSFER_WARNING = "collective wait/transfer for"

#: host ranges that say which collective a launch belongs to: NCCL/gloo/RCCL ranges, and user
#: annotations of a MoE token exchange (``dispatch`` / ``combine``, e.g. around DeepEP calls)
LINK_RANGE = r"^(nccl|gloo|rccl):"
MOE_RANGE = r"(?i)(^|[^a-z])(dispatch|combine)([^a-z]|$)"


def _link_ranges(frame: pl.LazyFrame) -> pl.LazyFrame:
    """The rows of ``frame`` (host events) that can enclose a collective's launch, the name patterns
    tested once per distinct name (:func:`.names.name_columns`): an ``nccl:``/``gloo:``/``rccl:``
    range or op, or an annotation named for MoE dispatch/combine."""
    # the library prefixes on every row (a literal prefix: cheap), the MoE words on the
    # annotations' distinct names only (no literal to search for)
    link = pl.col("name").str.contains(LINK_RANGE)
    by_link = frame.filter(pl.col("kind").is_in(["annotation", "cpu_op"]) & link)
    by_moe = name_columns(
        frame.filter(pl.col("kind") == "annotation"), __moe=pl.col("name").str.contains(MOE_RANGE).fill_null(False)
    ).filter(pl.col("__moe") & ~link.fill_null(False)).drop("__moe")
    return pl.concat([by_link, by_moe])


def _pg_config(meta: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for rank, text in meta.select("rank", "pg_config").iter_rows():  # one row per rank file
        if not text:
            continue
        try:
            cfg = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        for g in cfg if isinstance(cfg, list) else []:
            ranks = g.get("ranks")
            rows.append(
                {
                    "rank": rank,
                    "pg_name": str(g.get("pg_name")),
                    "cfg_desc": g.get("pg_desc"),
                    "cfg_size": int(g["pg_size"]) if str(g.get("pg_size", "")).isdigit() else None,
                    "cfg_ranks": ranks if isinstance(ranks, str) else orjson.dumps(ranks).decode() if ranks is not None else None,
                }
            )
    schema = {"rank": pl.Int32, "pg_name": pl.String, "cfg_desc": pl.String, "cfg_size": pl.Int64, "cfg_ranks": pl.String}
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


_LINK_COLS = ["coll_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name", "pg_desc", "pg_ranks", "coll_seq", "input_dims"]


def linking_threads(ev: pl.LazyFrame) -> pl.LazyFrame:
    """Host threads that can link a launch to a collective: those holding a
    ``record_param_comms`` op or an ``nccl:``/``gloo:``/``rccl:`` range (``rank, pid, tid``)."""
    rpc = ev.filter(pl.col("kind").is_in(["cpu_op", "annotation"]) & (pl.col("name") == "record_param_comms"))
    return pl.concat([rpc.select(THREAD), _link_ranges(ev).select(THREAD)]).unique()


def collectives(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, meta: pl.DataFrame, bus_bw_gbps: float = DEFAULT_BUS_BW_GBPS) -> pl.DataFrame:
    """One row per communication kernel with type, bytes, group, dimension, wait and transfer.
    The text columns (:data:`TEXT_COLS`: kernel name, type, group name, description and ranks,
    dimension) are ``pl.Categorical``.

    ``gpu``: labelled GPU work (:func:`.labels.label_gpu`); ``windows``: step windows.
    The per-rank part is :func:`collective_instances`, the part that needs every rank of a
    group :func:`match_instances`.
    """
    return match_instances(collective_instances(events, gpu, windows, meta), bus_bw_gbps)


def collective_instances(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, meta: pl.DataFrame,
                         tree: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per rank: one row per communication kernel with type, bytes, group, dimension, step and
    instance (everything but wait and transfer, which need the other ranks of the group).

    ``tree``: the rank's host call tree (:func:`.recompute.host_tree`) when already built; it
    must hold at least the threads of :func:`linking_threads`."""
    ev = events.lazy()
    k = gpu.lazy().filter(pl.col("cls") == "comm").select(
        "rank", "name", "stream", "start_ns", "end_ns", "correlation", "external_id", *[c for c in _LINK_COLS if c != "input_dims"]
    ).with_row_index("__k")
    # what the kernel's name says (type, library, dimension, element type): once per distinct name
    k = name_columns(
        k, __ktype=kernel_type(), __lib_type=library_expr("name", 2), __lib_dim=library_expr("name", 3),
        __lib=library_expr("name", 0), __kdtype=kernel_dtype(),
    )
    # host side: the launch call and its enclosing record_param_comms / nccl:* annotation
    # (only threads that hold a record_param_comms op or an nccl:/gloo:/rccl: range can link a
    # launch to a collective: the call tree of the others is not built)
    if tree is None:
        tree = host_tree(ev.join(linking_threads(ev), on=THREAD, how="semi")).collect(engine=query_engine())
    tree = tree.lazy()
    launch = (
        tree.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select(*THREAD, "pos", "correlation")
        # the launches of communication kernels only: the lookups below are per launch, and the
        # others (most of them) are never read
        .join(k.select("rank", "correlation"), on=["rank", "correlation"], how="semi")
        .unique(["rank", "correlation"])
    )
    rpc_rows = ev.filter((pl.col("kind") == "cpu_op") & (pl.col("name") == "record_param_comms"))
    rp_tree = (
        tree.filter(pl.col("name") == "record_param_comms")
        .select(*THREAD, pl.col("pos").alias("rp_pos"), pl.col("hi").alias("rp_hi"), "start_ns", "external_id")
        .join(rpc_rows.select("rank", "pid", "tid", "start_ns", "external_id", *[pl.col(c).alias(f"rp_{c}") for c in _LINK_COLS]), on=[*THREAD, "start_ns", "external_id"], how="left")
        .unique([*THREAD, "rp_pos"])
        .sort("rp_pos")
    )
    ann = (
        _link_ranges(tree)
        .select(*THREAD, pl.col("pos").alias("an_pos"), pl.col("hi").alias("an_hi"), pl.col("name").alias("an_name"))
        .sort("an_pos")
    )
    via_launch = (
        launch.sort("pos")
        .join_asof(rp_tree.drop("start_ns", "external_id"), left_on="pos", right_on="rp_pos", by=THREAD, strategy="backward", check_sortedness=False)
        .with_columns([pl.when(pl.col("rp_hi") >= pl.col("pos")).then(pl.col(f"rp_{c}")).alias(f"rp_{c}") for c in _LINK_COLS])
        .join_asof(ann, left_on="pos", right_on="an_pos", by=THREAD, strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("an_hi") >= pl.col("pos")).then(pl.col("an_name")).alias("an_name"))
        .select("rank", "correlation", "an_name", *[f"rp_{c}" for c in _LINK_COLS])
    )
    via_ext = (
        rpc_rows.filter(pl.col("external_id").is_not_null())
        .unique(["rank", "external_id"])
        .select("rank", "external_id", *[pl.col(c).alias(f"x_{c}") for c in _LINK_COLS])
    )
    j = (
        k.join(via_launch, on=["rank", "correlation"], how="left")
        .join(via_ext, on=["rank", "external_id"], how="left")
        .with_columns(
            [pl.coalesce(c, f"x_{c}", f"rp_{c}").alias(c) for c in _LINK_COLS if c != "input_dims"]
            + [pl.coalesce("x_input_dims", "rp_input_dims").alias("rp_input_dims")]
        )
    )
    ctype = pl.coalesce(
        pl.when(pl.col("coll_name").str.to_lowercase() != "coalesced").then(coll_type_expr("coll_name")),
        coll_type_expr("an_name"),
        pl.col("__ktype"),
        pl.col("__lib_type"),
        pl.lit("unknown"),
    )
    # what the kernel says about its dimension when no process group names one
    hint = pl.coalesce(pl.col("__lib_dim"), pl.when(pl.col("an_name").str.contains(MOE_RANGE)).then(pl.lit("EP")))
    # kernels of a library other than NCCL with no process group: one group per library
    lib = pl.col("__lib")
    group = pl.coalesce("pg_name", pl.when(lib.is_not_null() & (lib != "NCCL/RCCL")).then(lib), pl.lit("default"))
    j = j.with_columns(ctype.alias("coll_type"), hint.alias("__dim_hint"))
    nelems = pl.coalesce(pl.max_horizontal("in_nelems", "out_nelems"), dims_nelems())
    esize = pl.coalesce(
        dtype_size("dtype"),
        pl.when(pl.col("__ktype").fill_null("") != "send_recv").then(dtype_size("__kdtype")),
    )
    cfg = _pg_config(meta).lazy()
    world = meta.lazy().select("rank", pl.col("world_size").cast(pl.Int64).alias("world"))
    j = (
        j.with_columns((nelems * esize).alias("bytes"), group.alias("pg_name"))
        .join(cfg, on=["rank", "pg_name"], how="left")
        .join(world, on="rank", how="left")
        .with_columns(
            pl.coalesce("pg_desc", "cfg_desc").alias("pg_desc"),
            pl.coalesce("pg_ranks", "cfg_ranks").alias("pg_ranks"),
            pl.coalesce(
                "group_size",
                "cfg_size",
                pl.when(pl.col("pg_name") == "default").then(pl.col("world")),
            ).alias("group_size"),
        )
    )
    # rank stride from the ranks list
    rl = pl.col("pg_ranks").str.extract_all(r"-?\d+").list.eval(pl.element().cast(pl.Int64))
    j = j.with_columns(
        pl.when(rl.list.len() >= 2).then(rl.list.get(1, null_on_oob=True) - rl.list.get(0, null_on_oob=True)).alias("stride"),
        (pl.col("coll_type") == "send_recv").all().over("rank", "pg_name").alias("p2p_only"),
    ).with_columns(
        dimension_expr(pl.col("world"), pl.col("__dim_hint")).alias("dim"),
        pl.when(pl.col("pg_name") == "default").then(pl.lit("default")).otherwise(pl.col("pg_name")).alias("pg_name"),
    )
    # step of each kernel: the window holding its start
    win = windows.lazy().select("rank", "step", "wstart_ns", "wend_ns").sort("wstart_ns")
    j = (
        j.sort("start_ns", "__k")  # ties in the kernel's order: the instance below is then the same on every run
        .join_asof(win, left_on="start_ns", right_on="wstart_ns", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("start_ns") < pl.col("wend_ns")).then(pl.col("step")).alias("step"))
    )
    # cross-rank alignment: instance = Seq, else order within (rank, group)
    j = j.with_columns(
        pl.coalesce("coll_seq", pl.col("start_ns").rank("ordinal").over("rank", "pg_name").cast(pl.Int64)).alias("instance"),
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
    )
    return j.sort("__k").select(*_INSTANCE_COLS).with_columns(pl.col(c).cast(pl.Categorical) for c in TEXT_COLS).collect(engine=query_engine())


_INSTANCE_COLS = [
    "rank", "step", "name", "stream", "start_ns", "end_ns", "dur_ns", "coll_type", "bytes",
    "pg_name", "pg_desc", "group_size", "pg_ranks", "dim", "instance", "coll_seq",
]
#: the per-kernel text columns of the instances and of the collectives table: a few distinct
#: values each (kernel names, groups), so they are ``pl.Categorical`` (a 4-byte code per kernel,
#: the strings once per process): a job of many ranks holds a row per collective kernel.
#: Categoricals compare with strings (``==``, ``is_in``), sort and order lexically, give Python
#: strings in rows and dicts; ``.str`` and joins with a String column need ``.cast(pl.String)``.
TEXT_COLS = ["name", "coll_type", "pg_name", "pg_desc", "pg_ranks", "dim"]


def match_instances(inst: pl.DataFrame, bus_bw_gbps: float = DEFAULT_BUS_BW_GBPS) -> pl.DataFrame:
    """Wait and transfer of every collective kernel from the instances of all loaded ranks
    (:func:`collective_instances`, concatenated in load order): instance *i* of a group is
    aligned across its ranks, else the transfer is estimated from the bytes.

    What needs every rank comes from a narrow frame (group code, rank, instance, start), grouped
    a batch of ranks at a time: per group and instance the last arrival and how many ranks hold
    it, per group whether its ranks agree on the number of instances. The kernels are then
    matched against that small table a few of the instances' chunks (one per rank in a job) at a
    time (:func:`.rowbatches.chunks`), and the four result columns, cut like the instances, are put beside
    them: a job of many ranks never holds a temporary as long as all its kernels, nor copies the
    instances' columns (rows stay in load order).
    """
    bw = bus_bw_gbps * 1e9  # bytes per second
    n = pl.col("group_size").cast(pl.Float64)
    factor = (
        pl.when(pl.col("coll_type") == "all_reduce").then(2 * (n - 1) / n)
        .when(pl.col("coll_type").is_in(["all_gather", "reduce_scatter", "all_to_all"])).then((n - 1) / n)
        .otherwise(1.0)
    )
    est = (pl.col("bytes").cast(pl.Float64) * factor.fill_null(1.0) / bw * 1e9).round(0).cast(pl.Int64)
    group = pl.col("pg_name").to_physical().alias("__g")  # a categorical's code: one per group name
    runs = rank_runs(inst)
    # per group and instance: the last arrival and how many ranks hold it; per group and rank:
    # the number of instances. Grouped a batch of ranks at a time (ranks are disjoint between
    # batches, so the batches' rank counts add up), then the batches' groups.
    counts, partial = [], []
    for at, length in batches(runs, BATCH_ROWS):
        narrow = inst.slice(at, length).select(group, "rank", "instance", "start_ns")
        counts.append(narrow.group_by("__g", "rank").agg(pl.len().alias("__n")))
        partial.append(narrow.group_by("__g", "instance").agg(pl.col("start_ns").max().alias("__last"), pl.col("rank").n_unique().alias("__ranks")))
    del narrow
    # a group is aligned when at least two ranks hold it and they agree on its number of instances
    agree = pl.concat(counts).group_by("__g").agg(((pl.col("rank").n_unique() >= 2) & (pl.col("__n").n_unique() == 1)).alias("__agree"))
    arrival = (
        (pl.concat(partial).group_by("__g", "instance").agg(pl.col("__last").max(), pl.col("__ranks").sum()) if len(partial) > 1 else partial[0])
        .join(agree, on="__g", how="left")
    )
    del counts, partial
    # with a Seq arg the instance is exact; without, only groups whose ranks agree on the count
    aligned = (pl.col("__agree") | pl.col("__seq")) & (pl.col("__ranks") >= 2)
    parts = []
    for batch in batches_of(chunks(inst), RUN_ROWS):
        at, length = batch[0][0], sum(n for _, n in batch)
        part = (
            inst.slice(at, length)
            .select(group, "instance", "start_ns", "end_ns", "dur_ns", pl.col("coll_seq").is_not_null().alias("__seq"), est.alias("__est"))
            .join(arrival, on=["__g", "instance"], how="left", maintain_order="left")
            .select(
                aligned.alias("__aligned"), pl.col("__last"), "start_ns", "end_ns", "dur_ns", "__est",
            )
            .select(
                pl.when(pl.col("__aligned")).then(pl.col("__last")).alias("last_arrival_ns"),
                pl.when(pl.col("__aligned"))
                .then((pl.col("end_ns") - pl.max_horizontal("__last", "start_ns")).clip(0))
                .when(pl.col("__est").is_not_null())
                .then(pl.min_horizontal("__est", "dur_ns"))
                .alias("transfer_ns"),
                (~pl.col("__aligned") & pl.col("__est").is_not_null()).alias("transfer_estimated"),
                "dur_ns",
            )
            .select(
                "last_arrival_ns",
                pl.when(pl.col("transfer_ns").is_not_null()).then(pl.col("dur_ns") - pl.col("transfer_ns")).alias("wait_ns"),
                "transfer_ns",
                "transfer_estimated",
            )
            .rechunk()
        )
        parts += [part.slice(a - at, n) for a, n in batch]  # cut like the instances' chunks
    kept = inst.select(
        "rank", "step", "name", "stream", "start_ns", "end_ns", "dur_ns", "coll_type", "bytes",
        "pg_name", "pg_desc", "group_size", "pg_ranks", "dim", "instance",
    )
    return kept.hstack(pl.concat(parts, rechunk=False).get_columns())




def _keyed_classes(coll: pl.DataFrame) -> dict[str, list[str]]:
    return {
        "type": sorted(coll["coll_type"].unique().to_list()),
        "group": sorted(coll["pg_name"].unique().to_list()),
        "dim": sorted(coll["dim"].unique().to_list()),
    }


def exposure(gpu: pl.DataFrame, coll: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Exposed and overlapped communication per (rank, step, by, key), by = type / group / dim.

    For each ``by``, the ``exposed_ns`` of a step sum exactly to the step's ``exposed_comm_ns``
    and ``overlapped_ns`` to its ``overlapped_comm_ns`` (one sweep, same segments as the
    partition; concurrent keys are counted under ``"concurrent"``).
    """
    schema = {"rank": pl.Int32, "step": pl.Int64, "by": pl.String, "key": pl.String, "exposed_ns": pl.Int64, "overlapped_ns": pl.Int64}
    if coll.height == 0:
        return pl.DataFrame(schema=schema)
    keys = _keyed_classes(coll)
    names: dict[str, tuple[str, str]] = {}
    for by, vals in keys.items():
        for i, v in enumerate(vals):
            names[f"{by}{i}"] = (by, v)
    coll_l = coll.lazy()
    extra = []
    for cname, (by, v) in names.items():
        col = {"type": "coll_type", "group": "pg_name", "dim": "dim"}[by]
        extra.append(coll_l.filter(pl.col(col) == v).select("rank", "start_ns", "end_ns", pl.lit(cname).alias("cls")))
    base = gpu.lazy().select("rank", "start_ns", "end_ns", "cls")
    iv = pl.concat([base, *extra])
    classes = [*CLASSES, *names]
    seg = segments(iv, windows.lazy(), classes).with_columns((pl.col("t1") - pl.col("t0")).alias("len_ns"))
    busy_rc = (pl.col("n_compute") > 0) | (pl.col("n_recompute") > 0)
    seg = seg.with_columns(
        (~busy_rc & (pl.col("n_comm") > 0)).alias("__exp"),
        (busy_rc & (pl.col("n_comm") > 0)).alias("__ovl"),
    )
    outs = []
    for by in keys:
        cols = [c for c, (b, _) in names.items() if b == by]
        active = pl.sum_horizontal([(pl.col(f"n_{c}") > 0).cast(pl.Int32) for c in cols])
        key = pl.lit(COMM_CONCURRENT)
        for c in cols:
            key = pl.when((active == 1) & (pl.col(f"n_{c}") > 0)).then(pl.lit(names[c][1])).otherwise(key)
        key = pl.when(active == 0).then(pl.lit("unattributed")).otherwise(key)
        outs.append(
            seg.filter(pl.col("__exp") | pl.col("__ovl"))
            .with_columns(key.alias("key"))
            .group_by("rank", "step", "key")
            .agg(
                pl.col("len_ns").filter(pl.col("__exp")).sum().alias("exposed_ns"),
                pl.col("len_ns").filter(pl.col("__ovl")).sum().alias("overlapped_ns"),
            )
            .with_columns(pl.lit(by).alias("by"))
        )
    return pl.concat(outs).select(list(schema)).collect(engine=query_engine()).cast(schema).sort("rank", "step", "by", "key")


def summary(coll: pl.DataFrame, expo: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, by, key): count, bytes, time, wait, transfer, exposed, overlapped.

    The kernels are grouped once by (rank, step, type, group, dimension), one rank at a time
    (:func:`.rowbatches.rank_runs`), a few rows per rank and step, and the three views are sums over those
    groups (a job of many ranks has a row per collective kernel: one pass over it, not three).
    ``first`` values come from the group holding the earliest kernel, as a group-by over the
    kernels gives them. Its text columns are strings (those of ``coll`` may be categorical)."""
    sums = ["bytes", "wait_ns", "transfer_ns"]
    fine = (
        pl.concat([  # rank is a key: one rank's kernels at a time (temporaries the size of one rank)
            coll.slice(at, length).select(
                "rank", "step", "coll_type", "pg_name", "dim", *sums, "dur_ns", "transfer_estimated",
                "pg_desc", "group_size", "pg_ranks",
            )
            .with_row_index("__k", offset=at)
            .group_by("rank", "step", "coll_type", "pg_name", "dim")
            .agg(
                pl.col("__k").first(),
                pl.len().alias("count"),
                *[pl.col(c).sum() for c in sums],
                *[pl.col(c).is_not_null().any().alias(f"__has_{c}") for c in sums],
                pl.col("dur_ns").sum().alias("time_ns"),
                pl.col("transfer_estimated").any(),
                pl.col("pg_desc").first(),
                pl.col("group_size").first(),
                pl.col("pg_ranks").first(),
            )
            for at, length in batches(rank_runs(coll), RUN_ROWS)
        ])
        .filter(pl.col("step").is_not_null())
        .sort("__k")
        # the summary's text columns are strings (a few rows per step; ``key`` joins ``expo``)
        .with_columns(pl.col(c).cast(pl.String) for c in ("coll_type", "pg_name", "dim", "pg_desc", "pg_ranks"))
    )
    parts = []
    for by, col in (("type", "coll_type"), ("group", "pg_name"), ("dim", "dim")):
        parts.append(
            fine.group_by("rank", "step", pl.col(col).alias("key"), maintain_order=True)
            .agg(
                pl.col("count").sum().cast(pl.UInt32),
                *[pl.when(pl.col(f"__has_{c}").any()).then(pl.col(c).sum()).alias(c) for c in ["bytes"]],
                pl.col("time_ns").sum(),
                *[pl.when(pl.col(f"__has_{c}").any()).then(pl.col(c).sum()).alias(c) for c in ["wait_ns", "transfer_ns"]],
                pl.col("transfer_estimated").any(),
                pl.col("pg_desc").first(),
                pl.col("group_size").first(),
                pl.col("pg_ranks").first(),
                pl.col("dim").first(),
            )
            .with_columns(pl.lit(by).alias("by"))
        )
    stats = pl.concat(parts, how="vertical_relaxed")
    out = stats.join(expo, on=["rank", "step", "by", "key"], how="full", coalesce=True)
    return out.with_columns(
        pl.col("count").fill_null(0),
        pl.col("exposed_ns").fill_null(0),
        pl.col("overlapped_ns").fill_null(0),
    ).sort("rank", "step", "by", "key")


def comm_warnings(coll: pl.DataFrame, meta: pl.DataFrame) -> list[str]:
    """Warnings about what the communication analysis could not see or measure."""
    out = []
    multi = meta.filter(pl.col("world_size").fill_null(1) > 1).select("rank", "world_size")
    seen = coll.get_column("rank").unique().implode() if coll.height else pl.Series([], dtype=pl.Int32).implode()
    silent = multi.filter(~pl.col("rank").is_in(seen)).sort("rank")
    if silent.height:
        ranks = ", ".join(str(r) for r in silent.get_column("rank").to_list())
        out.append(
            f"rank {ranks}: part of a {silent.item(0, 'world_size')}-rank job but no communication kernel was found "
            "(no NCCL/RCCL, DeepEP, NVSHMEM, userbuffers, custom all-reduce or MSCCL++ kernel, none launched by "
            "record_param_comms): all its GPU time is counted as compute/other; if it communicates with kernels "
            "of another library, name them in `comm_kernels` (regexes of their names)"
        )
    if coll.height:
        unknown = coll.get_column("transfer_ns").null_count()
        if unknown:
            out.append(
                f"{TRANSFER_WARNING} {unknown} of {coll.height} kernels is unknown: the trace gives "
                "no byte count and not all ranks of its group are loaded"
            )
    return out
