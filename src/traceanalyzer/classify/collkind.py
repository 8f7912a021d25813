"""What a collective kernel is, from names: its type (from a collective's name, an annotation
or an NCCL kernel name), its element type and size, the element count of an ``Input Dims``
text, and the parallelism dimension of its process group.

Expressions only: :mod:`.comm` applies them to the communication kernels and their linked
host records.
"""

from __future__ import annotations

import polars as pl

_TYPE_RULES = [  # (regex on a lower-cased name, type); first match wins
    (r"reduce_?scatter|reducescatter", "reduce_scatter"),
    (r"all_?gather|allgather", "all_gather"),
    (r"all_?reduce|allreduce", "all_reduce"),
    (r"all_?to_?all|alltoall", "all_to_all"),
    (r"sendrecv|send_recv|batch_isend_irecv|(^|[^a-z])(send|recv)([^a-z]|$)|nccl:(send|recv)|isend|irecv", "send_recv"),
    (r"broadcast|bcast", "broadcast"),
    (r"barrier", "barrier"),
    (r"gather", "gather"),
    (r"scatter", "scatter"),
    (r"reduce", "reduce"),
    (r"(^|[^a-z])(dispatch|combine)([^a-z]|$)", "all_to_all"),  # MoE token exchange (DeepEP, Megatron)
]


_DTYPE_SIZE = {
    "float": 4, "float32": 4, "f32": 4, "float64": 8, "double": 8, "f64": 8,
    "half": 2, "float16": 2, "f16": 2, "__half": 2, "bfloat16": 2, "bf16": 2, "__nv_bfloat16": 2,
    "int8": 1, "int8_t": 1, "i8": 1, "uint8": 1, "uint8_t": 1, "u8": 1, "char": 1, "byte": 1, "bool": 1,
    "int32": 4, "int": 4, "int32_t": 4, "i32": 4, "uint32": 4, "uint32_t": 4, "u32": 4,
    "int64": 8, "long": 8, "int64_t": 8, "i64": 8, "uint64": 8, "uint64_t": 8, "u64": 8,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8": 1,
}


def coll_type_expr(col: str) -> pl.Expr:
    """Collective type from a name (collective arg, annotation or kernel name); null if none."""
    low = pl.col(col).str.to_lowercase()
    expr = pl.lit(None, pl.String)
    for pat, name in reversed(_TYPE_RULES):
        expr = pl.when(low.str.contains(pat)).then(pl.lit(name)).otherwise(expr)
    return expr


def kernel_type() -> pl.Expr:
    """Type from an NCCL kernel name: the token after ``ncclKernel_`` / ``ncclDevKernel_``."""
    tok = pl.col("name").str.extract(r"(?i)nccl(?:Dev)?Kernel_([A-Za-z]+)", 1).str.to_lowercase()
    return (
        pl.when(tok.is_null() | (tok == "generic"))
        .then(pl.lit(None, pl.String))
        .when(tok == "sendrecv").then(pl.lit("send_recv"))
        .when(tok.is_in(["send", "recv"])).then(pl.lit("send_recv"))
        .when(tok == "allreduce").then(pl.lit("all_reduce"))
        .when(tok == "allgather").then(pl.lit("all_gather"))
        .when(tok == "reducescatter").then(pl.lit("reduce_scatter"))
        .when(tok == "alltoall").then(pl.lit("all_to_all"))
        .when(tok == "broadcast").then(pl.lit("broadcast"))
        .when(tok == "reduce").then(pl.lit("reduce"))
        .otherwise(pl.lit(None, pl.String))
    )


def kernel_dtype() -> pl.Expr:
    """Element type from an NCCL kernel name (``..._Sum_float``, ``..._Sum_bf16_RING_LL``)."""
    types = "|".join(sorted({"float", "double", "half", "bfloat16", "int8_t", "uint8_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "f16", "f32", "f64", "bf16", "i8", "u8", "i32", "u32", "i64", "u64"}, key=len, reverse=True))
    return pl.col("name").str.extract(rf"_({types})(?:_|\(|$)", 1)


def dtype_size(col: str) -> pl.Expr:
    return pl.col(col).str.to_lowercase().str.replace(r"^torch\.", "").replace_strict(_DTYPE_SIZE, default=None, return_dtype=pl.Int64)


def dims_nelems() -> pl.Expr:
    """Elements of the first tensor in ``Input Dims`` text (``[[6144],[],...]`` -> 6144)."""
    first = pl.col("rp_input_dims").str.extract(r"^\[\[([0-9, ]+)\]", 1)
    return (
        first.str.split(",")
        .list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False))
        .list.eval(pl.element().product())
        .list.first()
    )


def dimension_expr(world: pl.Expr, hint: pl.Expr | None = None) -> pl.Expr:
    """Parallelism dimension of a group from ``pg_desc``, ``group_size``, ``stride``, ``p2p_only``.

    1. the description names it (``tp``/``tensor``, ``pp``/``pipe``, ``cp``/``context``,
       ``ep``/``expert``/``moe``, ``dp``/``data``/``fsdp``/``ddp``/``shard``/``replicate``;
       DeviceMesh's ``mesh_tp`` style included);
    1b. else ``hint`` when not null: what the kernel itself says (the library table: DeepEP is EP,
       userbuffers and custom all-reduce are TP; an enclosing ``dispatch``/``combine`` annotation
       or an all-to-all with no process-group information is EP);
    2. a group carrying only send/recv is PP;
    3. a group spanning the world (or ``default_pg``) is DP;
    4. contiguous ranks (stride 1) smaller than the world are TP;
    5. ranks strided by world/size (one per block) are DP;
    6. else unknown.
    """
    d = pl.col("pg_desc").str.to_lowercase().fill_null("")
    w = r"(^|[^a-z])"
    e = r"([^a-z]|$)"
    size = pl.col("group_size")
    return (
        pl.when(d.str.contains(f"{w}(tp|tensor|tensor_parallel){e}|tensor")).then(pl.lit("TP"))
        .when(d.str.contains(f"{w}(pp|pipe|pipeline){e}|pipeline")).then(pl.lit("PP"))
        .when(d.str.contains(f"{w}(cp|context){e}|context_parallel")).then(pl.lit("CP"))
        .when(d.str.contains(f"{w}(ep|expert|moe){e}|expert")).then(pl.lit("EP"))
        .when(d.str.contains(f"{w}(dp|data|fsdp|ddp|hsdp|shard|replicate|dp_shard|dp_replicate){e}|data_parallel")).then(pl.lit("DP"))
        .when((hint if hint is not None else pl.lit(None, pl.String)).is_not_null()).then(hint if hint is not None else pl.lit(None, pl.String))
        .when(pl.col("p2p_only")).then(pl.lit("PP"))
        .when((size == world) | (d == "default_pg")).then(pl.lit("DP"))
        .when((pl.col("stride") == 1) & (size < world)).then(pl.lit("TP"))
        .when(pl.col("stride").is_not_null() & (pl.col("stride") * size == world)).then(pl.lit("DP"))
        .otherwise(pl.lit("unknown"))
    )
