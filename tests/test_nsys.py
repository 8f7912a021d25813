"""Nsight Systems input (issue 4).

Real exports are in ``../shared/traces/nsys`` (skipped with a reason when absent); small cuts and their
JSON / JSON Lines / Parquet / Arrow conversions are in ``fixtures/nsys`` (see fixtures/README.md).
Expected numbers are computed independently with plain SQL over the SQLite files.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.errors import InvalidTrace, NoGpuActivity
from traceanalyzer.parsers.nsys import load_nsys, sniff_nsys

ROOT = Path(__file__).resolve().parents[1]
from conftest import SHARED, shared_or_skip  # noqa: E402
NSYS = SHARED / "traces" / "nsys"
FIX = ROOT / "fixtures" / "nsys"
CONVERT = ROOT / "scripts" / "nsys_convert.py"

needs_shared = pytest.mark.skipif(not NSYS.is_dir(), reason=f"shared nsys traces not found at {NSYS}")
REAL = sorted(NSYS.glob("*.sqlite")) if NSYS.is_dir() else []
MFU = ["nsys-ai__mfu_2gpu_before.sqlite", "nsys-ai__mfu_2gpu_after.sqlite"]


def sql(path: Path, query: str, *args) -> list[tuple]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query, args).fetchall()
    finally:
        con.close()


def tables(path: Path) -> set[str]:
    return {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}


# ------------------------------------------------------------------------------------------------
# Independent reference: interval-union length per device, in plain SQL (window functions)
# ------------------------------------------------------------------------------------------------

def union_ns(path: Path, intervals_sql: str) -> int:
    """Length of the union of [s, e) intervals produced by ``intervals_sql`` (columns s, e)."""
    q = f"""
    WITH iv AS ({intervals_sql}),
    o AS (SELECT s, e, MAX(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm FROM iv),
    g AS (SELECT s, e, SUM(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END)
                         OVER (ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp FROM o)
    SELECT COALESCE(SUM(ge - gs), 0) FROM (SELECT MIN(s) AS gs, MAX(e) AS ge FROM g GROUP BY grp)
    """
    return sql(path, q)[0][0]


def sql_device_numbers(path: Path, device: int) -> dict[str, int]:
    """Per device: compute (non-NCCL kernels), nccl, busy (kernels+memcpy+memset), exposed NCCL
    (busy time where only NCCL runs), idle (first..last GPU activity minus busy)."""
    d = int(device)
    kern = ("SELECT k.start AS s, k.end AS e, s.value AS n FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            f"JOIN StringIds s ON s.id = k.shortName WHERE k.deviceId = {d}")
    mem = " UNION ALL ".join(
        f"SELECT start AS s, end AS e FROM {t} WHERE deviceId = {d}"
        for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET") if t in tables(path))
    compute = union_ns(path, f"SELECT s, e FROM ({kern}) WHERE n NOT LIKE 'nccl%'")
    nccl = union_ns(path, f"SELECT s, e FROM ({kern}) WHERE n LIKE 'nccl%'")
    busy = union_ns(path, f"SELECT s, e FROM ({kern}) UNION ALL {mem}")
    non_nccl = union_ns(path, f"SELECT s, e FROM ({kern}) WHERE n NOT LIKE 'nccl%' UNION ALL {mem}")
    lo, hi = sql(path, f"SELECT MIN(s), MAX(e) FROM (SELECT s, e FROM ({kern}) UNION ALL {mem})")[0]
    return {"compute": compute, "nccl": nccl, "busy": busy, "exposed_nccl": busy - non_nccl,
            "idle": (hi - lo) - busy, "window": hi - lo}


def sql_breakdown(path: Path, device: int) -> dict[str, int]:
    """The partition by priority compute > comm > other > idle over [first, last GPU activity],
    from plain SQL unions: exposed_comm = |compute u nccl| - |compute|, other = busy - |compute u nccl|."""
    d = sql_device_numbers(path, device)
    kern = ("SELECT k.start AS s, k.end AS e FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            f"WHERE k.deviceId = {int(device)}")
    kernels = union_ns(path, kern)
    return {"duration": d["window"], "compute": d["compute"], "exposed_comm": kernels - d["compute"],
            "other": d["busy"] - kernels, "idle": d["idle"]}


def frame_union_ns(df: pl.DataFrame) -> int:
    """Union length of [start_ns, end_ns) rows, from the definition (sort, running max, gaps)."""
    if df.height == 0:
        return 0
    df = df.sort("start_ns", "end_ns").with_columns(
        pm=pl.col("end_ns").cum_max().shift(1)
    ).with_columns(grp=(pl.col("pm").is_null() | (pl.col("start_ns") > pl.col("pm"))).cum_sum())
    g = df.group_by("grp").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    return int((g["end_ns"] - g["start_ns"]).sum())


def frame_device_numbers(trace, rank: int) -> dict[str, int]:
    gpu = trace.events.filter((pl.col("rank") == rank) & pl.col("kind").is_in(["kernel", "memcpy", "memset",
                                                                               "gpu_other"]))
    is_nccl = (pl.col("kind") == "kernel") & pl.col("name").str.starts_with("nccl")
    busy = frame_union_ns(gpu)
    non_nccl = frame_union_ns(gpu.filter(~is_nccl))
    return {
        "compute": frame_union_ns(gpu.filter((pl.col("kind") == "kernel") & ~is_nccl)),
        "nccl": frame_union_ns(gpu.filter(is_nccl)),
        "busy": busy,
        "exposed_nccl": busy - non_nccl,
        "idle": int(gpu["end_ns"].max() - gpu["start_ns"].min()) - busy,
        "window": int(gpu["end_ns"].max() - gpu["start_ns"].min()),
    }


# Measured once with sql_device_numbers (plain SQL over the files); pinned so a changed file or a
# broken reference query is noticed. ns per CUDA device.
EXPECTED_SQL = {
    "nsys-ai__mfu_2gpu_before.sqlite": {
        0: {"compute": 253690832, "nccl": 17172652, "busy": 273817787, "exposed_nccl": 17172652,
            "idle": 26031025, "window": 299848812},
        1: {"compute": 256095624, "nccl": 8229100, "busy": 267275916, "exposed_nccl": 8229100,
            "idle": 31385635, "window": 298661551},
    },
    "nsys-ai__mfu_2gpu_after.sqlite": {
        0: {"compute": 227484352, "nccl": 9989016, "busy": 240108749, "exposed_nccl": 9989016,
            "idle": 59142466, "window": 299251215},
        1: {"compute": 227608953, "nccl": 23753085, "busy": 254000754, "exposed_nccl": 23753085,
            "idle": 45268668, "window": 299269422},
    },
}


@needs_shared
@pytest.mark.parametrize("name", MFU)
def test_mfu_per_device_numbers_match_sql(name):
    path = NSYS / name
    trace = load_nsys(path)
    # one rank per device, ranks ordered by device id
    devices = [r[0] for r in sql(path, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
    assert trace.ranks == list(range(len(devices))) == [0, 1]
    assert trace.meta["world_size"].to_list() == [2, 2]
    for rank, dev in enumerate(devices):
        want = sql_device_numbers(path, dev)
        assert want == EXPECTED_SQL[name][dev]
        assert frame_device_numbers(trace, rank) == want
        assert want["busy"] + want["idle"] == want["window"]
        assert 0 < want["exposed_nccl"] <= want["nccl"]


# ------------------------------------------------------------------------------------------------
# Every real export loads; counts equal plain SQL counts
# ------------------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("path", shared_or_skip(REAL, "shared nsys traces", NSYS), ids=lambda p: p.name)
def test_real_export_counts(path):
    trace = load_nsys(path)
    trace.validate()
    have = tables(path)
    ev = trace.events
    n_dev = sql(path, "SELECT COUNT(*) FROM (SELECT DISTINCT globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL)")[0][0]
    assert trace.meta.height == n_dev == len(trace.ranks)
    assert set(trace.meta["format"]) == {"nsys-sqlite"}
    for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"), ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "gpu_sync")):
        n = sql(path, f"SELECT COUNT(*) FROM {table}")[0][0] if table in have else 0
        assert ev.filter(pl.col("kind") == kind).height == n, table
    # total kernel time is preserved exactly
    ksum = sql(path, "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    k = ev.filter(pl.col("kind") == "kernel")
    assert int((k["end_ns"] - k["start_ns"]).sum()) == ksum
    # single-device processes: every runtime call and NVTX range appears exactly once
    if n_dev == sql(path, "SELECT COUNT(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]:
        n_rt = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) IN "
                         "(SELECT DISTINCT globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL)")[0][0]
        assert ev.filter(pl.col("kind") == "runtime").height == n_rt
        n_nv = 0
        if "NVTX_EVENTS" in have:
            n_nv = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND end IS NOT NULL "
                             "AND (globalTid >> 24) IN (SELECT DISTINCT globalPid >> 24 FROM CUPTI_ACTIVITY_KIND_KERNEL)")[0][0]
        assert ev.filter(pl.col("kind") == "annotation").height == n_nv


@needs_shared
def test_launch_joins_work_on_process_and_correlation():
    path = NSYS / "nsys-ai__mfu_2gpu_before.sqlite"
    want = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                     "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)")[0][0]
    ev = load_nsys(path).events
    k = ev.filter(pl.col("kind") == "kernel").select("rank", "correlation")
    r = ev.filter(pl.col("kind") == "runtime").select("rank", "correlation", pl.col("name").alias("api"))
    joined = k.join(r, on=["rank", "correlation"], how="inner")
    assert joined.height == want == 3986
    # NCCL kernels are launched through the driver API; names keep the nccl prefix for downstream
    nccl = ev.filter((pl.col("kind") == "kernel") & pl.col("name").str.starts_with("nccl"))
    n_nccl = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                       "WHERE s.value LIKE 'nccl%'")[0][0]
    assert nccl.height == n_nccl == 66
    assert nccl.join(r, on=["rank", "correlation"])["api"].unique().to_list() == ["cuLaunchKernelEx"]


@needs_shared
def test_sync_rows_follow_context_not_deviceid():
    # nsys writes deviceId 0 on the sync rows of process 145, which runs on device 1 (context 2)
    path = NSYS / "nsys-ai__mfu_2gpu_before.sqlite"
    n145 = sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE (globalPid >> 24) & 16777215 = 145")
    ev = load_nsys(path).events
    sync1 = ev.filter((pl.col("kind") == "gpu_sync") & (pl.col("rank") == 1))
    assert sync1.height == n145[0][0] == 188
    assert set(sync1["pid"]) == {"1"}


@needs_shared
def test_nvtx_registered_strings_and_threads():
    path = NSYS / "nsys-ai__mfu_2gpu_before.sqlite"
    ev = load_nsys(path).events
    first = sql(path, "SELECT n.start, n.end, s.value, (n.globalTid >> 24) & 16777215, n.globalTid & 16777215 "
                      "FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE s.value = 'ncclGroupEnd' "
                      "ORDER BY n.start LIMIT 1")[0]
    row = ev.filter((pl.col("kind") == "annotation") & (pl.col("start_ns") == first[0])
                    & (pl.col("name") == "ncclGroupEnd"))
    assert row.select("end_ns", "pid", "tid").row(0) == (first[1], str(first[3]), str(first[4]))
    # inline text (PyTorch emit_nvtx) comes through as is
    n_copy = sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE text = 'aten::copy_, op_id = 991065'")[0][0]
    assert ev.filter(pl.col("name") == "aten::copy_, op_id = 991065").height == n_copy == 2
    # 2.9.1 schema: registered MPI strings
    old = load_nsys(NSYS / "pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite").events
    names = old.filter(pl.col("kind") == "annotation")["name"].value_counts()
    want = dict(sql(NSYS / "pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                    "SELECT COALESCE(n.text, s.value), COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
                    "ON s.id = n.textId WHERE eventType = 59 GROUP BY 1"))
    assert dict(names.iter_rows()) == want
    assert want["MPI_Send"] >= 1


@needs_shared
def test_device_info_through_context_tables():
    m = load_nsys(NSYS / "nsys-ai__mock.sqlite").meta
    assert m.select("device_name", "num_sms", "compute_capability").row(0) == ("NVIDIA GeForce RTX 3080", 68, "8.6")
    c = load_nsys(NSYS / "pipit__perlmutter-cloverleaf-cuda.sqlite").meta
    assert c["device_name"].to_list() == ["NVIDIA A100-SXM4-80GB"]
    b = load_nsys(NSYS / "nsys-ai__mfu_2gpu_before.sqlite").meta  # no TARGET_INFO_GPU in this export
    assert b["device_name"].to_list() == ["GPU 0 (name not recorded)", "GPU 1 (name not recorded)"]
    assert b["nccl_version"].to_list() == ["2.25.1-1"] * 2


# ------------------------------------------------------------------------------------------------
# Formats: the same file gives the same frames whatever its export format
# ------------------------------------------------------------------------------------------------

FORMATS = {".jsonl": "nsys-jsonlines", ".json": "nsys-json", "_pqtdir": "nsys-parquet", "_arwdir": "nsys-arrow"}


def assert_same_trace(got, ref, legacy_json: bool) -> None:
    assert_frame_equal(got.events, ref.events)
    drop = ["format", "file"] + (
        ["device_name", "num_sms", "compute_capability", "cuda_version", "nccl_version"] if legacy_json else [])
    assert_frame_equal(got.meta.drop(drop), ref.meta.drop(drop))


@pytest.mark.parametrize("base", ["mfu_2gpu_before_cut", "mock_cut"])
@pytest.mark.parametrize("suffix", list(FORMATS))
def test_fixture_formats_match_sqlite(base, suffix):
    ref = load_nsys(FIX / f"{base}.sqlite")
    path = FIX / f"{base}{suffix}"
    assert sniff_nsys(path) == FORMATS[suffix]
    got = load_nsys(path)
    assert set(got.meta["format"]) == {FORMATS[suffix]}
    assert_same_trace(got, ref, suffix == ".json")
    assert got.events.height > 0


def test_cut_fixture_content():
    t = load_nsys(FIX / "mfu_2gpu_before_cut.sqlite")
    path = FIX / "mfu_2gpu_before_cut.sqlite"
    assert t.ranks == [0, 1]
    nccl = t.events.filter((pl.col("kind") == "kernel") & pl.col("name").str.starts_with("ncclDevKernel_SendRecv"))
    assert nccl.height == sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                                    "ON s.id = k.shortName WHERE s.value LIKE 'nccl%'")[0][0] == 2
    # the SendRecv kernel from nsys_formats.md §2.2 and its driver-API launch
    k = t.events.filter((pl.col("kind") == "kernel") & (pl.col("correlation") == 2612712))
    assert k.select("rank", "start_ns", "end_ns", "stream").row(0) == (0, 60127005302, 60127758742, 7)
    r = t.events.filter((pl.col("kind") == "runtime") & (pl.col("correlation") == 2612712))
    assert r.select("rank", "name", "start_ns").row(0) == (0, "cuLaunchKernelEx", 60126367707)


@needs_shared
@pytest.mark.parametrize("to,suffix", [("json", ".json"), ("jsonlines", ".jsonl"), ("parquetdir", "_pqtdir"),
                                       ("arrowdir", "_arwdir")])
def test_converter_round_trip_full_file(tmp_path, to, suffix):
    src = NSYS / "nsys-ai__mfu_2gpu_before.sqlite"
    out = tmp_path / f"mfu{suffix}"
    subprocess.run([sys.executable, str(CONVERT), "convert", str(src), "--to", to, "-o", str(out)], check=True)
    assert_same_trace(load_nsys(out), load_nsys(src), to == "json")


# ------------------------------------------------------------------------------------------------
# CUDA graph launches (GRAPH_TRACE): no real export has them, so add one to a copy of the mock cut
# ------------------------------------------------------------------------------------------------

GRAPH_DDL = """CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL)"""


def test_graph_launch_is_gpu_activity(tmp_path):
    db = tmp_path / "graph.sqlite"
    shutil.copy(FIX / "mock_cut.sqlite", db)
    con = sqlite3.connect(db)
    gpid, tid = con.execute("SELECT k.globalPid, r.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                            "CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId) LIMIT 1").fetchone()
    t_end = con.execute("SELECT MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    sid = con.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
    con.execute("INSERT INTO StringIds VALUES (?, 'cudaGraphLaunch_v10000')", (sid,))
    con.execute(GRAPH_DDL)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 1, 0, 7, 99999, ?, 5, 6)",
                (t_end + 1000, t_end + 51000, gpid))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
                "returnValue) VALUES (?, ?, 0, ?, 99999, ?, 0)", (t_end, t_end + 500, tid, sid))
    con.commit()
    con.close()
    for path in (db, tmp_path / "graph.json"):
        if path.suffix == ".json":
            subprocess.run([sys.executable, str(CONVERT), "convert", str(db), "--to", "json", "-o", str(path)],
                           check=True)
        t = load_nsys(path)
        g = t.events.filter(pl.col("kind") == "gpu_other")
        assert g.select("rank", "name", "start_ns", "end_ns", "correlation", "stream").rows() == [
            (0, "CUDA graph 5", t_end + 1000, t_end + 51000, 99999, 7)]
        launch = t.events.filter((pl.col("kind") == "runtime") & (pl.col("correlation") == 99999))
        assert launch["name"].to_list() == ["cudaGraphLaunch"]
        assert any("GRAPH_TRACE" in w for w in t.warnings)
        assert g.height in (t.gpu_events().height - 3,)  # 2 kernels + 1 memcpy + the graph launch


# ------------------------------------------------------------------------------------------------
# Detection and errors
# ------------------------------------------------------------------------------------------------

@needs_shared
def test_sniff_real_files():
    for p in REAL:
        assert sniff_nsys(p) == "nsys-sqlite"
    assert sniff_nsys(NSYS / "pipit__nbody-nvtx_nvtx_pushpop_trace.csv") is None
    assert sniff_nsys(NSYS / "SOURCE.md") is None


def test_sniff_by_content_not_extension(tmp_path):
    renamed = tmp_path / "trace.bin"
    shutil.copy(FIX / "mock_cut.jsonl", renamed)
    assert sniff_nsys(renamed) == "nsys-jsonlines"
    legacy = tmp_path / "export.txt"
    shutil.copy(FIX / "mock_cut.json", legacy)
    assert sniff_nsys(legacy) == "nsys-json"
    kineto = tmp_path / "kineto.json"
    kineto.write_text('{"schemaVersion": 1, "traceEvents": []}\n')
    assert sniff_nsys(kineto) is None
    pretty = tmp_path / "pretty.json"
    pretty.write_text('{\n  "traceEvents": []\n}\n')
    assert sniff_nsys(pretty) is None
    assert sniff_nsys(tmp_path) is None  # a directory without nsys tables


def test_nsys_rep_says_what_to_run(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00\x01binary report")
    assert sniff_nsys(rep) == "nsys-rep"
    with pytest.raises(InvalidTrace, match=r"nsys export --type sqlite"):
        load_nsys(rep)


def test_other_sqlite_is_rejected_clearly(tmp_path):
    db = tmp_path / "app.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    assert sniff_nsys(db) == "nsys-sqlite"
    with pytest.raises(InvalidTrace, match="not an Nsight Systems export") as e:
        load_nsys(db)
    assert e.value.exit_code == 4 and "\n" not in str(e.value)
    bad = tmp_path / "corrupt.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(InvalidTrace):
        load_nsys(bad)


def variant(tmp_path: Path, src: Path, name: str, stmts: list[str]) -> Path:
    """A writable copy of the SQLite file ``src``, ``tmp_path/name.sqlite``, with ``stmts`` run on it."""
    dst = tmp_path / f"{name}.sqlite"
    shutil.copy(src, dst)
    dst.chmod(0o644)
    with closing(sqlite3.connect(dst)) as con, con:
        for stmt in stmts:
            con.execute(stmt)
    return dst


def test_missing_string_table_and_no_gpu_activity(tmp_path):
    db = variant(tmp_path, FIX / "mock_cut.sqlite", "nostr", ["DROP TABLE StringIds"])
    with pytest.raises(InvalidTrace, match="StringIds"):
        load_nsys(db)
    cpu = variant(tmp_path, FIX / "mock_cut.sqlite", "cpu", [f"DROP TABLE {t}" for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")])
    with pytest.raises(NoGpuActivity):
        load_nsys(cpu)


# ------------------------------------------------------------------------------------------------
# NVTX step / recompute ranges become annotations on the launching thread (what the step and
# recompute logic downstream consumes)
# ------------------------------------------------------------------------------------------------

def test_nvtx_step_and_checkpoint_ranges_cover_their_launches(tmp_path):
    db = tmp_path / "steps.sqlite"
    shutil.copy(FIX / "mfu_2gpu_before_cut.sqlite", db)
    con = sqlite3.connect(db)
    # the thread of process 144 that launched the NCCL kernel (correlation 2612712)
    gtid = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = 2612712").fetchone()[0]
    lo, hi = 60126000000, 60130000000
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "VALUES (?, ?, 59, 'ProfilerStep#7', ?, 0)", (lo, hi, gtid))
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId) "
                "VALUES (?, ?, 60, 'CheckpointFunctionBackward, seq = 3', ?, ?, 0)", (lo, lo + 1_000_000, gtid, gtid))
    con.commit()
    con.close()
    ev = load_nsys(db).events
    step = ev.filter(pl.col("name") == "ProfilerStep#7")
    pid, tid = str((gtid >> 24) & 0xFFFFFF), str(gtid & 0xFFFFFF)
    assert step.select("rank", "kind", "pid", "tid", "start_ns", "end_ns").rows() == [
        (0, "annotation", pid, tid, lo, hi)]
    ck = ev.filter(pl.col("name").str.contains("CheckpointFunctionBackward"))
    assert ck.select("rank", "kind", "tid").rows() == [(0, "annotation", tid)]
    # launches on that thread inside the step map to GPU work of rank 0 by (rank, correlation)
    launches = ev.filter((pl.col("kind") == "runtime") & (pl.col("tid") == tid) & (pl.col("start_ns") >= lo)
                         & (pl.col("end_ns") <= hi)).select("rank", "correlation")
    work = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).select("rank", "correlation", "start_ns")
    joined = launches.join(work, on=["rank", "correlation"])
    want = sql(db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN (SELECT correlationId, globalPid FROM "
                   "CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                   "UNION ALL SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) g "
                   "ON g.correlationId = r.correlationId AND (g.globalPid >> 24) = (r.globalTid >> 24) "
                   "WHERE r.globalTid = ? AND r.start >= ? AND r.end <= ?", gtid, lo, hi)[0][0]
    assert joined.height == want > 0
    assert set(joined["rank"]) == {0}


def test_dispatcher_routes_nsys_exports():
    from traceanalyzer.parsers import load

    for suffix, fmt in ((".sqlite", "nsys-sqlite"), ("_pqtdir", "nsys-parquet"), (".json", "nsys-json")):
        t = load(FIX / f"mfu_2gpu_before_cut{suffix}")
        assert set(t.meta["format"]) == {fmt} and t.ranks == [0, 1]


# ------------------------------------------------------------------------------------------------
# End to end: the generic breakdown on every real export against plain SQL
# ------------------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("path", shared_or_skip(REAL, "shared nsys traces", NSYS), ids=lambda p: p.name)
def test_breakdown_matches_sql_on_every_real_export(path):
    """Every bucket of every device against :func:`sql_breakdown` (plain SQL unions over the
    export's kernel / memcpy / memset tables, no package code), to the nanosecond."""
    from traceanalyzer import breakdown

    with sqlite3.connect(path) as db:
        devices = [r[0] for r in db.execute("SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY 1")]
    steps = breakdown(load_nsys(path)).sort("rank")
    # no step ranges in these captures: the whole capture is one step per rank, rank i = device i
    assert steps["rank"].to_list() == list(range(len(devices)))
    for rank, dev in enumerate(devices):
        want = sql_breakdown(path, dev)
        row = steps.filter(pl.col("rank") == rank).row(0, named=True)
        assert {k: row[f"{k}_ns"] for k in want} == want
        assert row["recompute_ns"] == 0
