"""Read the text output of the ``nccl-tests`` ``*_perf`` binaries into one polars frame.

Public surface: :func:`read_nccl_tests` (a file -> :data:`NCCL_SCHEMA` frame), :func:`parse_nccl_tests`
(the same from text), :data:`BINARIES` (binary name -> collective type) and :func:`bus_factor`
(the nccl-tests bus-bandwidth factor of a collective over ``n`` ranks).

What is read (every line is classified with polars expressions; nothing loops over rows):

* the result rows ``size count type [redop] [root] time algbw busbw #wrong time algbw busbw #wrong``
  — out-of-place then in-place — of every ``*_perf`` binary and of both layouts in the wild: the
  current one (``redop`` and ``root`` columns, ``#wrong``) and the 2019–2021 one (no ``root``
  column, an ``error`` column such as ``2e-06``; all-to-all leaves ``redop`` empty; broadcast has
  ``root`` but no ``redop``). The last eight fields are always the two timing blocks;
* ``#  Rank  R Group G Pid P on HOST device D [BUSID] NAME`` (``Group`` absent before 2022):
  ranks, hosts, GPUs per host and the device name. One host = ``intra`` node, several =
  ``inter`` node; none listed = ``unknown``;
* which binary wrote it: ``# Collective test starting: X_perf`` (since 2.17), else a command line
  naming ``X_perf`` in the text above the results, else the file name.

A file may hold several tests one after the other (a log of a sweep): each column-header block
(``#  size  count  type ...``) starts a test; the lines above it describe it.

Without ``Rank`` lines the rank count is recovered from the printed ``busbw / algbw`` ratio when
that ratio pins it down to one integer despite the two printed decimals (``nranks_source`` says
which). Anything else that is not nccl-tests output, or a result row that is cut short or
garbled, raises :class:`~traceanalyzer.errors.InvalidTrace` (exit 4) naming the file and line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl

from traceanalyzer.baselines.text import read_text
from traceanalyzer.errors import InvalidTrace

#: nccl-tests binary (without ``_perf``) -> collective type as :mod:`traceanalyzer.classify.comm` names it
BINARIES = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "sendrecv": "send_recv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}

#: one row per test × message size × placement
NCCL_SCHEMA = {
    "source": pl.String,  # file the row was read from
    "test": pl.Int32,  # 1-based index of the test within the file
    "collective": pl.String,  # all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast, reduce, ...
    "placement": pl.String,  # out_of_place | in_place
    "size_bytes": pl.Int64,  # nccl-tests "size": the whole buffer (all ranks' shares for all-gather / reduce-scatter)
    "count": pl.Int64,  # elements
    "dtype": pl.String,
    "redop": pl.String,  # sum, none, ... (null when the layout has no such column)
    "root": pl.Int64,  # -1 for rootless collectives (null when the layout has no such column)
    "time_us": pl.Float64,
    "algbw_gbps": pl.Float64,  # size / time, GB/s (1e9 bytes/s)
    "busbw_gbps": pl.Float64,  # algbw × bus factor
    "wrong": pl.String,  # "#wrong" / "error" column as printed (0, N/A, 2e-06)
    "nranks": pl.Int32,  # ranks in the test (null: not recoverable)
    "nranks_source": pl.String,  # "rank lines" | "busbw/algbw ratio" | "given" | null
    "nhosts": pl.Int32,
    "gpus_per_host": pl.Int32,  # most ranks on one host
    "scope": pl.String,  # intra | inter | unknown
    "device": pl.String,  # GPU name from the Rank lines (most common)
}

_BIN_RE = r"(?:^|[\s/`'\"])(" + "|".join(sorted(BINARIES, key=len, reverse=True)) + r")_perf(?:_mpi)?\b"
_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
# prefixes that launchers add to each line: "[1,0]<stdout>:" (Open MPI --tag-output), "[0]" (mpirun -prepend-rank),
# "  0: " (srun --label)
_PREFIX = r"^(?:\[[\d,]+\](?:<std(?:out|err)>:)?|\s*\d+:\s)"
_ROW = r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(.*\S)\s*$"
_RANK = r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*?)\s*$"
_COLHDR = r"^#\s*size\s+count\s+type\b"
_START = r"Collective test starting:\s*(\w+?)_perf"


def bus_factor(collective: str, n: float | None) -> float | None:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw × factor."""
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0
    if n is None or n < 1:
        return None
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "hypercube"):
        return (n - 1) / n
    return None


def bus_factor_expr(coll: pl.Expr, n: pl.Expr) -> pl.Expr:
    """:func:`bus_factor` as a polars expression over a collective column and a rank-count column."""
    n = n.cast(pl.Float64)
    return (
        pl.when(coll.is_in(["broadcast", "reduce", "send_recv"])).then(pl.lit(1.0))
        .when(coll == "all_reduce").then(2.0 * (n - 1) / n)
        .when(coll.is_in(["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "hypercube"])).then((n - 1) / n)
        .otherwise(None)
    )


def read_nccl_tests(path: str | Path, collective: str | None = None, nranks: int | None = None,
                    scope: str | None = None) -> pl.DataFrame:
    """Parse one nccl-tests output file. ``collective`` / ``nranks`` / ``scope`` fill in what the
    file does not say (they never override what it says)."""
    text, p = read_text(path, "nccl-tests output", binary="nccl-tests text output", directory="an nccl-tests output file")
    return parse_nccl_tests(text, source=str(p), collective=collective, nranks=nranks, scope=scope)


def _collective_from_name(name: str) -> str | None:
    m = re.search(r"(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv|broadcast|hypercube|gather|scatter|reduce)",
                  name.lower())
    if not m:
        return None
    key = m.group(1).replace("allreduce", "all_reduce").replace("allgather", "all_gather")
    key = key.replace("reducescatter", "reduce_scatter").replace("all_to_all", "alltoall").replace("all_toall", "alltoall")
    key = key.replace("send_recv", "sendrecv")
    return BINARIES.get(key)


def parse_nccl_tests(text: str, source: str = "<text>", collective: str | None = None,
                     nranks: int | None = None, scope: str | None = None) -> pl.DataFrame:
    """Parse nccl-tests output text into a :data:`NCCL_SCHEMA` frame (see the module doc)."""
    if collective is not None and collective not in BINARIES.values():
        raise InvalidTrace(f"unknown collective {collective!r}: one of {', '.join(BINARIES.values())}", source)
    lines = pl.DataFrame({"raw": text.splitlines()}).with_row_index("lineno", offset=1)
    if not lines.height or not text.strip():
        raise InvalidTrace("empty file: not nccl-tests output", source)
    ln = lines.with_columns(
        pl.col("raw").str.replace_all(_ANSI, "").str.replace(_PREFIX, "").str.strip_chars_end().alias("line")
    ).with_columns(
        pl.col("line").str.contains(_COLHDR).alias("is_hdr"),
        pl.col("line").str.contains(_ROW).alias("is_row"),
    ).with_columns(pl.col("is_hdr").cast(pl.Int32).cum_sum().alias("seg"))
    if not ln["is_hdr"].any():
        raise InvalidTrace("no nccl-tests result table (no '#  size  count  type ...' header line): "
                           "not the output of an nccl-tests *_perf binary", source)

    # ---- header facts per test: lines of segment k-1 (and header lines) describe test k
    facts = ln.filter(~pl.col("is_row")).select(
        (pl.col("seg") + 1).alias("test"),
        pl.col("line").str.extract(_START, 1).alias("start_bin"),
        pl.col("line").str.extract(_BIN_RE, 1).alias("cmd_bin"),
        pl.col("line").str.extract(_RANK, 1).cast(pl.Int32).alias("rank"),
        pl.col("line").str.extract(_RANK, 2).alias("host"),
        pl.col("line").str.extract(_RANK, 3).alias("device"),
    )
    per_host = facts.filter(pl.col("rank").is_not_null()).group_by("test", "host").agg(pl.len().alias("n_on_host"))
    seg_facts = (
        facts.group_by("test")
        .agg(
            pl.col("start_bin").drop_nulls().last(),
            pl.col("cmd_bin").drop_nulls().last(),
            pl.col("rank").drop_nulls().len().alias("rank_lines"),
            pl.col("host").drop_nulls().n_unique().alias("nhosts"),
            pl.col("device").drop_nulls().mode().first().alias("device"),
        )
        .join(per_host.group_by("test").agg(pl.col("n_on_host").max().alias("gpus_per_host")), on="test", how="left")
        .sort("test")
    )

    # ---- result rows
    rows = ln.filter(pl.col("is_row") & (pl.col("seg") > 0))
    if not rows.height:
        raise InvalidTrace("an nccl-tests header but no result rows (the run printed nothing or the copy is cut)", source)
    tok = rows.with_columns(pl.col("line").str.strip_chars().str.replace_all(r"\s+", " ").str.split(" ").alias("tok"))
    tok = tok.with_columns(pl.col("tok").list.len().alias("ntok"))
    short = tok.filter(pl.col("ntok") < 11)
    if short.height:
        r = short.row(0, named=True)
        raise InvalidTrace(f"line {r['lineno']}: result row cut short ({r['ntok']} fields, expected at least 11: "
                           "size count type time algbw busbw #wrong ×2)", source)
    f = lambda i: pl.col("tok").list.get(i, null_on_oob=True)  # noqa: E731
    num = lambda i: f(i).cast(pl.Float64, strict=False)  # noqa: E731
    mid_n = pl.col("ntok") - 11  # fields between type and the two timing blocks: redop and/or root
    res = tok.select(
        "lineno", pl.col("seg").cast(pl.Int32).alias("test"),
        f(0).cast(pl.Int64, strict=False).alias("size_bytes"),
        f(1).cast(pl.Int64, strict=False).alias("count"),
        f(2).alias("dtype"),
        pl.when(mid_n == 2).then(f(3))
        .when((mid_n == 1) & ~f(3).str.contains(r"^-?\d+$")).then(f(3)).alias("redop"),
        pl.when(mid_n == 2).then(f(4).cast(pl.Int64, strict=False))
        .when((mid_n == 1) & f(3).str.contains(r"^-?\d+$")).then(f(3).cast(pl.Int64, strict=False)).alias("root"),
        (mid_n > 2).alias("__bad_mid"),
        *[num(-8 + i).alias(f"oop_{c}") for i, c in enumerate(["time_us", "algbw_gbps", "busbw_gbps"])],
        f(-5).alias("oop_wrong"),
        *[num(-4 + i).alias(f"ip_{c}") for i, c in enumerate(["time_us", "algbw_gbps", "busbw_gbps"])],
        f(-1).alias("ip_wrong"),
    )
    bad = res.filter(
        pl.col("__bad_mid") | pl.any_horizontal(pl.col("^(oop|ip)_(time_us|algbw_gbps|busbw_gbps)$").is_null())
    )
    if bad.height:
        raise InvalidTrace(f"line {bad['lineno'][0]}: garbled result row (expected numbers for time, algbw and busbw "
                           "in both the out-of-place and in-place blocks)", source)
    long = pl.concat([
        res.select("lineno", "test", "size_bytes", "count", "dtype", "redop", "root",
                   pl.lit(pl_name).alias("placement"),
                   *[pl.col(f"{pre}_{c}").alias(c) for c in ["time_us", "algbw_gbps", "busbw_gbps", "wrong"]])
        for pre, pl_name in (("oop", "out_of_place"), ("ip", "in_place"))
    ])

    # ---- which collective, ranks and scope per test
    file_coll = _collective_from_name(Path(source).name)
    seg_facts = seg_facts.with_columns(
        pl.coalesce(
            pl.col("start_bin").replace_strict(BINARIES, default=None),
            pl.col("cmd_bin").replace_strict(BINARIES, default=None),
            pl.lit(file_coll, pl.String),
            pl.lit(collective, pl.String),
        ).alias("collective"),
    )
    # tests whose header block is missing (a repeated column header) inherit the previous test's facts
    tests = pl.DataFrame({"test": sorted(long["test"].unique().to_list())}, schema={"test": pl.Int32})
    seg_facts = (
        pl.DataFrame({"test": list(range(1, int(ln["seg"].max()) + 1))}, schema={"test": pl.Int32})
        .join(seg_facts.with_columns(pl.col("test").cast(pl.Int32)), on="test", how="left")
        .with_columns(pl.when(pl.col("rank_lines") > 0).then(pl.struct("rank_lines", "nhosts", "device", "gpus_per_host")).alias("__r"))
        .with_columns(pl.col("__r").forward_fill(), pl.col("collective").forward_fill())
        .select("test", "collective", pl.col("__r").struct.field("rank_lines").alias("rank_lines"),
                pl.col("__r").struct.field("nhosts").cast(pl.Int32).alias("nhosts"),
                pl.col("__r").struct.field("device").alias("device"),
                pl.col("__r").struct.field("gpus_per_host").cast(pl.Int32).alias("gpus_per_host"))
        .join(tests, on="test", how="semi")
    )
    unknown = seg_facts.filter(pl.col("collective").is_null())
    if unknown.height:
        raise InvalidTrace("cannot tell which nccl-tests binary wrote the results (no 'Collective test starting' line, "
                           "no *_perf command line, and the file name names no collective): name the file after the "
                           "binary, e.g. all_reduce_perf.txt", source)
    out = long.join(seg_facts, on="test", how="left")
    out = _ranks(out, nranks).with_columns(
        pl.when(pl.col("nhosts") == 1).then(pl.lit("intra"))
        .when(pl.col("nhosts") > 1).then(pl.lit("inter"))
        .otherwise(pl.lit(scope or "unknown")).alias("scope"),
        pl.lit(source).alias("source"),
    )
    return out.select([pl.col(c).cast(t) for c, t in NCCL_SCHEMA.items()]).sort("test", "placement", "size_bytes", descending=[False, True, False], maintain_order=True)


def _ranks(out: pl.DataFrame, given: int | None) -> pl.DataFrame:
    """Rank count per test: the Rank lines, else the busbw/algbw ratio when it pins one integer."""
    ratio = (
        out.filter(pl.col("algbw_gbps") > 0)
        .sort("algbw_gbps", descending=True)
        .group_by("test", maintain_order=True)
        .agg(pl.col("collective").first(), pl.col("algbw_gbps").first().alias("a"), pl.col("busbw_gbps").first().alias("b"))
    )
    inferred = {}
    for t, coll, a, b in ratio.iter_rows():  # one row per test (a handful), not per event
        # the printed values carry two decimals: the ratio lies in [lo, hi]; accept n only if both ends agree
        lo, hi = (b - 0.005) / (a + 0.005), (b + 0.005) / max(a - 0.005, 1e-9)
        n_lo, n_hi = _n_from_ratio(coll, lo), _n_from_ratio(coll, hi)
        if n_lo is not None and n_lo == n_hi and n_lo >= 2:
            inferred[t] = n_lo
    inf = pl.DataFrame({"test": list(inferred), "__inf": list(inferred.values())}, schema={"test": pl.Int32, "__inf": pl.Int32})
    return out.join(inf, on="test", how="left").with_columns(
        pl.coalesce(pl.when(pl.col("rank_lines") > 0).then(pl.col("rank_lines")), "__inf", pl.lit(given, pl.Int32)).cast(pl.Int32).alias("nranks"),
        pl.when(pl.col("rank_lines") > 0).then(pl.lit("rank lines"))
        .when(pl.col("__inf").is_not_null()).then(pl.lit("busbw/algbw ratio"))
        .when(pl.lit(given is not None)).then(pl.lit("given")).alias("nranks_source"),
    )


def _n_from_ratio(coll: str, r: float) -> int | None:
    """Invert the bus factor: the nearest integer n whose factor is r (None where the factor does not depend on n)."""
    if coll == "all_reduce" and r < 2.0:
        x = 2.0 / (2.0 - r)
    elif coll in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "hypercube") and r < 1.0:
        x = 1.0 / (1.0 - r)
    else:
        return None
    return int(round(x)) if math.isfinite(x) and x > 0 else None
