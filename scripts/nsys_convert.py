#!/usr/bin/env python3
"""Convert a real ``nsys export --type sqlite`` file into the other documented nsys export layouts,
and cut real SQLite exports into small test fixtures.

No real JSON / JSON Lines / Parquet / Arrow nsys exports are publicly available, so the test
fixtures for those formats are made from real SQLite exports with this script, following the
layouts ``nsys export`` writes (Nsight Systems User Guide, "Export Formats"; docs/nsys.md):

``jsonlines``   one JSON object per SQLite row, the SQLite column names as keys plus
                ``"table": "<TABLE>"``; numbers stay JSON numbers. Every table of the file is written,
                StringIds first.
``json``        (legacy protobuf-JSON) first line ``{"data": [...]}`` (array index = string id;
                ids missing from a cut StringIds table are ""), then one event object per line, in
                time order: ``{"Type":48|47,"TraceProcessEvent":{...}}`` for CUDA API calls,
                ``{"Type":79,"CudaEvent":{...,"kernel":{...}}}`` kernels,
                ``{"Type":80,"CudaEvent":{...,"memcpy"|"memset":{...}}}`` memory ops,
                ``{"Type":106,"CudaEvent":{...,"sync":{...,"syncType":"SYNCHRONIZATION_TYPE_..."}}}``,
                ``{"Type":59|60|34|75,"NvtxEvent":{"Type":..,"Timestamp":..,"EndTimestamp":..,"Text":..,
                "GlobalTid":..,"DomainId":..,"NsTime":true}}``. 64-bit values (timestamps, global ids,
                contextId, streamId, string ids, sizes) are JSON strings; 32-bit ones
                (correlationId, deviceId, eventClass, enum values) are numbers.
                Not documented, chosen here and read back the same way by the loader: registered NVTX
                strings as ``"TextId":"<string id>"``; memset ``eventClass`` 2 with
                ``{"sizebytes","value","memKind"}``; CUDA graph launches as Type 130 with
                ``"graph":{"graphId","graphExecId"}``. Unset fields are written as JSON null (protobuf
                would omit them; the loader accepts both).
``parquetdir``  ``<OUT>/<TABLE>.parquet``, one file per table, same columns as SQLite.
``arrowdir``    ``<OUT>/<TABLE>.arrow``, Arrow IPC file per table, schema metadata ``table_name``.

Usage::

    python scripts/nsys_convert.py convert IN.sqlite --to jsonlines|json|parquetdir|arrowdir -o OUT
    python scripts/nsys_convert.py cut IN.sqlite OUT.sqlite [--start NS --end NS]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as ipc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # the checkout's package
from traceanalyzer.parsers.nsys import (  # noqa: E402
    GRAPH, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, STRINGS, SYNC, _SqliteTables,
)

I64, STR = pl.Int64, pl.String

_SYNC_ENUM = {0: "SYNCHRONIZATION_TYPE_UNKNOWN", 1: "SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE",
              2: "SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", 3: "SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE",
              4: "SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE"}


def read_all(path: Path) -> dict[str, pl.DataFrame]:
    """Every table of an nsys SQLite export, all columns, as polars frames (declared column types)."""
    src = _SqliteTables(path)
    try:
        names = [r[0] for r in src.conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        out = {}
        for t in names:
            cols = src.columns(t)
            rows = src.conn.execute(f'SELECT * FROM "{t}"').fetchall()
            out[t] = pl.DataFrame(rows, schema={c: src._info(t)[c] for c in cols}, orient="row", strict=False)
        return out
    finally:
        src.close()


def _ordered(tables: dict[str, pl.DataFrame]) -> list[str]:
    return ([STRINGS] if STRINGS in tables else []) + [t for t in tables if t != STRINGS]


def to_jsonlines(tables: dict[str, pl.DataFrame], out: Path) -> None:
    with open(out, "w", encoding="utf-8") as f:
        for t in _ordered(tables):
            df = tables[t]
            if df.height == 0:
                continue  # JSON Lines has one line per row: an empty table writes nothing
            lines = df.select(pl.struct(pl.all(), pl.lit(t).alias("table")).struct.json_encode().alias("l"))
            f.write("\n".join(lines.get_column("l").to_list()))
            f.write("\n")


def to_parquetdir(tables: dict[str, pl.DataFrame], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for t, df in tables.items():
        df.write_parquet(out / f"{t}.parquet")


def to_arrowdir(tables: dict[str, pl.DataFrame], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for t, df in tables.items():
        tbl = df.to_arrow()
        tbl = tbl.replace_schema_metadata({**(tbl.schema.metadata or {}), b"table_name": t.encode()})
        with pa.OSFile(str(out / f"{t}.arrow"), "wb") as sink, ipc.new_file(sink, tbl.schema) as w:
            w.write_table(tbl)


def _s(c: str) -> pl.Expr:
    """A 64-bit value as the legacy exporter writes it: a JSON string."""
    return pl.col(c).cast(STR)


def _present(df: pl.DataFrame, cols: list[str]) -> list[str]:
    return [c for c in cols if c in df.columns]


def to_legacy_json(tables: dict[str, pl.DataFrame], out: Path) -> None:
    parts: list[pl.DataFrame] = []  # (ts, line)

    def gpu_base(df: pl.DataFrame, event_class: int) -> list[pl.Expr]:
        """The CudaEvent fields; columns a (modified) export lacks are left out, as protobuf omits them."""
        e = [_s("start").alias("startNs"), _s("end").alias("endNs"), pl.lit(event_class).alias("eventClass")]
        e += [pl.col(c) for c in _present(df, ["correlationId", "deviceId"])]
        e += [_s(c) for c in _present(df, ["contextId", "streamId", "globalPid", "greenContextId"])]
        return e

    def emit(df: pl.DataFrame, typ: pl.Expr, key: str, fields: list[pl.Expr], ts: str = "start") -> None:
        if df.height == 0:
            return
        parts.append(df.select(
            pl.col(ts).alias("ts"),
            pl.struct(typ.alias("Type"), pl.struct(fields).alias(key)).struct.json_encode().alias("l"),
        ))

    if (k := tables.get(KERNEL)) is not None and k.height:
        kfields = [_s(c) for c in _present(k, ["demangledName", "shortName", "mangledName"])] + [
            pl.col(c) for c in _present(k, ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                                            "staticSharedMemory", "dynamicSharedMemory", "registersPerThread",
                                            "localMemoryPerThread", "localMemoryTotal", "sharedMemoryExecuted",
                                            "launchType", "cacheConfig"])] + (
            [_s("gridId")] if "gridId" in k.columns else [])
        emit(k, pl.lit(79), "CudaEvent", gpu_base(k, 3) + [pl.struct(kfields).alias("kernel")])
    if (m := tables.get(MEMCPY)) is not None:
        mf = [_s("bytes").alias("sizebytes")] + [pl.col(c) for c in _present(m, ["copyKind", "srcKind", "dstKind",
                                                                               "copyCount"])]
        emit(m, pl.lit(80), "CudaEvent", gpu_base(m, 1) + [pl.struct(mf).alias("memcpy")])
    if (s := tables.get(MEMSET)) is not None:
        sf = [_s("bytes").alias("sizebytes")] + [pl.col(c) for c in _present(s, ["value", "memKind"])]
        emit(s, pl.lit(80), "CudaEvent", gpu_base(s, 2) + [pl.struct(sf).alias("memset")])
    if (y := tables.get(SYNC)) is not None:
        yf = [pl.col("syncType").replace_strict(_SYNC_ENUM, default="SYNCHRONIZATION_TYPE_UNKNOWN",
                                                return_dtype=STR).alias("syncType")]
        yf += [_s(c) for c in _present(y, ["eventId", "eventSyncId"])]
        emit(y, pl.lit(106), "CudaEvent", gpu_base(y, 5) + [pl.struct(yf).alias("sync")])
    if (g := tables.get(GRAPH)) is not None:
        gf = [_s(c) for c in _present(g, ["graphId", "graphExecId"])]
        emit(g, pl.lit(130), "CudaEvent", gpu_base(g, 7) + [pl.struct(gf).alias("graph")])
    if (r := tables.get(RUNTIME)) is not None:
        corr = pl.col("correlationId") if "correlationId" in r.columns else pl.lit(None, I64)
        typ = pl.when(corr.fill_null(0) == 0).then(47).otherwise(48)
        emit(r, typ, "TraceProcessEvent", [
            _s("start").alias("startNs"), _s("end").alias("endNs"),
            *[pl.col(c) for c in _present(r, ["correlationId", "eventClass"])],
            *[_s(c).alias("name") for c in _present(r, ["nameId"])],
            *[pl.col(c).alias("returnValue32") for c in _present(r, ["returnValue"])],
            *[_s(c) for c in _present(r, ["globalTid"])]])
    if (n := tables.get(NVTX)) is not None:
        named = {"end": "EndTimestamp", "textId": "TextId", "globalTid": "GlobalTid", "domainId": "DomainId"}
        emit(n, pl.col("eventType"), "NvtxEvent", [
            pl.col("eventType").alias("Type"), _s("start").alias("Timestamp"),
            *[_s(c).alias(named[c]) for c in _present(n, list(named))],
            *[pl.col(c).alias("Text") for c in _present(n, ["text"])], pl.lit(True).alias("NsTime")])

    strings = tables[STRINGS]
    n_ids = int(strings.get_column("id").max()) + 1 if strings.height else 0
    dense = pl.DataFrame({"id": pl.arange(0, n_ids, eager=True).cast(I64)}).join(
        strings.select(pl.col("id").cast(I64), "value"), on="id", how="left").with_columns(pl.col("value").fill_null(""))
    data_line = pl.DataFrame({"data": [dense.get_column("value")]}).select(
        pl.struct("data").struct.json_encode()).item()
    events = pl.concat(parts).sort("ts", maintain_order=True) if parts else pl.DataFrame({"l": []}, schema={"l": STR})
    with open(out, "w", encoding="utf-8") as f:
        f.write(data_line + "\n")
        if events.height:
            f.write("\n".join(events.get_column("l").to_list()) + "\n")


# ---------------------------------------------------------------------------------------------------
# cut: make a small fixture from a real export
# ---------------------------------------------------------------------------------------------------

#: Tables kept by ``cut`` (TARGET_INFO_SYSTEM_ENV and META_DATA_CAPTURE are left out: they hold the
#: capture host's environment).
CUT_TABLES = ["META_DATA_EXPORT", "EXPORT_META_DATA", STRINGS, KERNEL, MEMCPY, MEMSET, GRAPH, RUNTIME, SYNC,
              NVTX, "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_CUDA_CONTEXT_INFO",
              "TARGET_INFO_CUDA_STREAM", "PROCESSES"]
STRING_REFS = ["demangledName", "shortName", "mangledName", "nameId", "textId", "jsonTextId"]


def cut(src: Path, dst: Path, start: int | None, end: int | None) -> None:
    """Copy the CUT_TABLES of ``src`` into ``dst`` (DDL verbatim), keep the rows inside
    [start, end] (events with a start/end), keep only the StringIds the kept rows reference and
    renumber them densely (0..n-1, in id order) so that the legacy JSON string array stays small."""
    if dst.exists():
        dst.unlink()
    db = sqlite3.connect(dst)
    db.execute("ATTACH DATABASE ? AS src", (f"{src.resolve().as_uri()}?mode=ro",))
    have = {r[0]: r[1] for r in db.execute("SELECT name, sql FROM src.sqlite_master WHERE type='table'")}
    kept = [t for t in CUT_TABLES if t in have]
    lo = start if start is not None else -(1 << 62)
    hi = end if end is not None else (1 << 62)
    for t in kept:
        db.execute(have[t])
        cols = [r[1] for r in db.execute(f'PRAGMA src.table_info("{t}")')]
        where = ""
        if "start" in cols and "end" in cols:
            where = f' WHERE "start" >= {lo} AND coalesce("end", "start") <= {hi}'
        if t != STRINGS:
            db.execute(f'INSERT INTO main."{t}" SELECT * FROM src."{t}"{where}')
    refs = []
    for t in kept:
        cols = [r[1] for r in db.execute(f'PRAGMA main.table_info("{t}")')]
        refs += [(t, c) for c in cols if c in STRING_REFS]
    union = " UNION ".join(f'SELECT "{c}" AS id FROM main."{t}" WHERE "{c}" IS NOT NULL' for t, c in refs)
    db.execute("CREATE TEMP TABLE idmap AS SELECT id AS old, row_number() OVER (ORDER BY id) - 1 AS new "
               f"FROM (SELECT 0 AS id UNION {union})" if union else
               "CREATE TEMP TABLE idmap AS SELECT 0 AS old, 0 AS new")
    db.execute("CREATE INDEX temp.idmap_old ON idmap(old)")
    db.execute(f'INSERT INTO main."{STRINGS}" SELECT m.new, s.value FROM temp.idmap m JOIN src."{STRINGS}" s '
               "ON s.id = m.old")
    for t, c in refs:
        db.execute(f'UPDATE main."{t}" SET "{c}" = (SELECT new FROM temp.idmap WHERE old = "{c}") '
                   f'WHERE "{c}" IS NOT NULL')
    meta = "META_DATA_EXPORT" if "META_DATA_EXPORT" in kept else "EXPORT_META_DATA"
    if meta in kept:
        db.execute(f'INSERT INTO main."{meta}" VALUES (?, ?)',
                   ("TRACEANALYZER_CUT", f"scripts/nsys_convert.py cut {src.name} --start {start} --end {end} "
                                         "(StringIds renumbered densely)"))
    db.commit()
    db.execute("DETACH DATABASE src")
    db.execute("VACUUM")
    db.close()


def convert(src: Path, to: str, out: Path) -> None:
    tables = read_all(src)
    {"jsonlines": to_jsonlines, "json": to_legacy_json, "parquetdir": to_parquetdir,
     "arrowdir": to_arrowdir}[to](tables, out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("src", type=Path)
    c.add_argument("--to", required=True, choices=["jsonlines", "json", "parquetdir", "arrowdir"])
    c.add_argument("-o", "--out", type=Path, required=True)
    k = sub.add_parser("cut")
    k.add_argument("src", type=Path)
    k.add_argument("dst", type=Path)
    k.add_argument("--start", type=int)
    k.add_argument("--end", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "convert":
        convert(a.src, a.to, a.out)
    else:
        cut(a.src, a.dst, a.start, a.end)


if __name__ == "__main__":
    main()
