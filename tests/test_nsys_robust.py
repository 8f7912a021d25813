"""Nsight Systems input that is odd but valid, or damaged: optional columns and NULLs, absurd
timestamps, truncated text exports, damaged Parquet / Arrow tables, non-UTF-8 text, device names.

Every variant is built with SQL (or by cutting bytes) in tmp_path from a real export in
``../shared/traces/nsys`` (skipped when absent) or from the small cuts in ``fixtures/nsys``; expected
numbers come from the unmodified export, through plain SQL (``test_nsys.sql_breakdown``) or the
loader's answer on the original file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.cli import main
from traceanalyzer.errors import InputNotFound, InvalidTrace
from traceanalyzer.parsers import discover
from traceanalyzer.parsers.nsys import load_nsys

from conftest import run_unprivileged
from test_nsys import CONVERT, FIX, NSYS, REAL, needs_shared, sql, sql_breakdown, variant

MFU = NSYS / "nsys-ai__mfu_2gpu_before.sqlite"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
GPU_TABLES = (KERNEL, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
BUCKETS = ["rank", "step", "start_ns", "duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns",
           "idle_ns"]


def columns(path: Path, table: str) -> list[str]:
    return [r[1] for r in sql(path, f'PRAGMA table_info("{table}")')]


def rebuild(path: Path, table: str, keep: list[str]) -> list[str]:
    """SQL that re-creates ``table`` with only the ``keep`` columns (CREATE TABLE AS SELECT: no NOT NULL)."""
    cols = ", ".join(f'"{c}"' for c in keep)
    return [f'CREATE TABLE _t AS SELECT {cols} FROM "{table}"', f'DROP TABLE "{table}"',
            f'ALTER TABLE _t RENAME TO "{table}"']


def buckets(path: Path) -> pl.DataFrame:
    from traceanalyzer import breakdown

    return breakdown(load_nsys(path)).select(BUCKETS).sort("rank", "step")


def sql_buckets(path: Path) -> dict[int, dict[str, int]]:
    """Per rank (= device order) the partition from plain SQL over the original export."""
    devices = [r[0] for r in sql(path, f"SELECT DISTINCT deviceId FROM {KERNEL} ORDER BY 1")]
    return {rank: sql_breakdown(path, d) for rank, d in enumerate(devices)}


def assert_matches_sql(got: pl.DataFrame, ref_path: Path) -> None:
    for rank, want in sql_buckets(ref_path).items():
        row = got.filter(pl.col("rank") == rank).row(0, named=True)
        assert {k: row[f"{k}_ns"] for k in want} == want, rank


def run(*args) -> tuple[int, str, str]:
    """The CLI as a user runs it (a subprocess: no traceback, exit code, one stderr line)."""
    r = subprocess.run([sys.executable, "-m", "traceanalyzer", *map(str, args)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    return r.returncode, r.stdout, r.stderr


def run_inproc(capsys, *args) -> tuple[int, str, str]:
    """The CLI in-process (faster; the same entry point the console script calls)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def one_error_line(err: str, path: Path, code_fragment: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("traceanalyzer: error: ") and str(path) in lines[0] and code_fragment in lines[0], err
    assert "Traceback" not in err


# ------------------------------------------------------------------------------------------------
# 1. optional columns and NULLs
# ------------------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("case", ["null_globalpid", "no_globalpid_column", "core_columns_only", "nulls_in_optional"])
def test_kernel_table_variants_give_the_original_breakdown(tmp_path, case):
    cols = columns(MFU, KERNEL)
    stmts = {
        "null_globalpid": [f"UPDATE {KERNEL} SET globalPid = NULL"],
        "no_globalpid_column": rebuild(MFU, KERNEL, [c for c in cols if c != "globalPid"]),
        # the columns the nsys docs call core, nothing else (no globalPid, context, correlation, stream)
        "core_columns_only": rebuild(MFU, KERNEL, ["start", "end", "deviceId", "shortName"]),
        "nulls_in_optional": rebuild(MFU, KERNEL, cols) + [
            f"UPDATE {KERNEL} SET globalPid = NULL WHERE rowid % 2 = 0",
            f"UPDATE {KERNEL} SET streamId = NULL, contextId = NULL WHERE rowid % 3 = 0",
            f"UPDATE {KERNEL} SET correlationId = NULL WHERE rowid % 5 = 0",
            f"UPDATE {KERNEL} SET demangledName = NULL WHERE rowid % 7 = 0",
        ],
    }[case]
    path = variant(tmp_path, MFU, case, stmts)
    trace = load_nsys(path)
    assert trace.ranks == [0, 1]
    assert not [w for w in trace.warnings if str(path) in w]  # every row's process was inferred
    got = buckets(path)
    assert_frame_equal(got, buckets(MFU))
    assert_matches_sql(got, MFU)
    # every kernel kept, on the device it ran on
    ev = trace.events.filter(pl.col("kind") == "kernel")
    assert ev.height == sql(MFU, f"SELECT COUNT(*) FROM {KERNEL}")[0][0]
    assert ev.group_by("rank").len().sort("rank")["len"].to_list() == [
        r[0] for r in sql(MFU, f"SELECT COUNT(*) FROM {KERNEL} GROUP BY deviceId ORDER BY deviceId")]


@pytest.mark.parametrize("to,suffix", [("json", ".json"), ("jsonlines", ".jsonl"), ("parquetdir", "_pqtdir"),
                                       ("arrowdir", "_arwdir")])
def test_null_globalpid_in_every_format(tmp_path, to, suffix):
    """The same NULLs written as JSON null / Parquet and Arrow nulls give the original frames."""
    src = FIX / "mfu_2gpu_before_cut.sqlite"
    db = variant(tmp_path, src, "nullpid", [f"UPDATE {KERNEL} SET globalPid = NULL"])
    out = tmp_path / f"nullpid{suffix}"
    subprocess.run([sys.executable, str(CONVERT), "convert", str(db), "--to", to, "-o", str(out)], check=True)
    got, ref = load_nsys(out), load_nsys(FIX / f"mfu_2gpu_before_cut{suffix}")
    assert_frame_equal(got.events, ref.events)
    assert got.warnings == ref.warnings


@needs_shared
@pytest.mark.parametrize("src", REAL, ids=[p.name for p in REAL])
def test_null_globalpid_on_every_real_export(tmp_path, src):
    path = variant(tmp_path, src, "nullpid", rebuild(src, KERNEL, columns(src, KERNEL))
                   + [f"UPDATE {KERNEL} SET globalPid = NULL"])
    got, ref = load_nsys(path), load_nsys(src)
    assert_frame_equal(got.events, ref.events)
    assert_frame_equal(buckets(path), buckets(src))


@needs_shared
def test_kernels_keep_their_launches_when_globalpid_is_null(tmp_path):
    path = variant(tmp_path, MFU, "null", [f"UPDATE {KERNEL} SET globalPid = NULL"])
    ev, ref = load_nsys(path).events, load_nsys(MFU).events
    for e in (ev, ref):
        k = e.filter(pl.col("kind") == "kernel").select("rank", "correlation")
        r = e.filter(pl.col("kind") == "runtime").select("rank", "correlation")
        assert k.join(r, on=["rank", "correlation"]).height == 3986  # as test_nsys pins on the original


@needs_shared
def test_no_process_anywhere_is_analysed_per_device(tmp_path):
    """No GPU row has a globalPid and there are two host processes: the documented fallback is one
    rank per device without host events; its GPU numbers are still exactly the plain-SQL ones."""
    path = variant(tmp_path, MFU, "nopid", [f"UPDATE {t} SET globalPid = NULL" for t in GPU_TABLES])
    trace = load_nsys(path)
    n_rows = sum(sql(MFU, f"SELECT COUNT(*) FROM {t}")[0][0] for t in GPU_TABLES[:3])
    warn = [w for w in trace.warnings if "no process id" in w]
    assert len(warn) == 1 and str(n_rows) in warn[0] and "devices 0, 1" in warn[0]
    assert trace.ranks == [0, 1]
    assert trace.events.filter(pl.col("kind").is_in(["runtime", "annotation"])).height == 0
    assert_matches_sql(buckets(path), MFU)


@needs_shared
def test_single_process_capture_without_globalpid_keeps_everything(tmp_path):
    mock = NSYS / "nsys-ai__mock.sqlite"
    have = {r[0] for r in sql(mock, "SELECT name FROM sqlite_master WHERE type='table'")}
    path = variant(tmp_path, mock, "mock_nopid", [f"UPDATE {t} SET globalPid = NULL" for t in GPU_TABLES if t in have])
    got, ref = load_nsys(path), load_nsys(mock)
    assert_frame_equal(got.events, ref.events)
    assert_frame_equal(got.meta.drop("file"), ref.meta.drop("file"))


@needs_shared
def test_null_start_rows_are_dropped_and_counted(tmp_path):
    path = variant(tmp_path, MFU, "nullstart", rebuild(MFU, KERNEL, columns(MFU, KERNEL)) + [
        f"UPDATE {KERNEL} SET start = NULL WHERE rowid % 100 = 0"])
    n = sql(path, f"SELECT COUNT(*) FROM {KERNEL} WHERE start IS NULL")[0][0]
    assert n == 40
    trace = load_nsys(path)
    assert any(f"dropped {n} GPU activity rows with no start, end or device" in w for w in trace.warnings)
    assert trace.events.filter(pl.col("kind") == "kernel").height == 4010 - n


# ------------------------------------------------------------------------------------------------
# 2. absurd timestamps
# ------------------------------------------------------------------------------------------------

def _copy_kernels(where: str, start: str, end: str) -> list[str]:
    """Extra kernel rows: copies of the ``where`` rows with new start / end expressions."""
    return [f"CREATE TEMP TABLE x AS SELECT * FROM {KERNEL} WHERE {where}",
            f"UPDATE x SET start = {start}, end = {end}", f"INSERT INTO {KERNEL} SELECT * FROM x"]


@needs_shared
@pytest.mark.parametrize("case,where,start,end,n,reason", [
    ("at_zero", "rowid = 7", "0", "1000", 1, "at or before time 0"),
    ("at_zero_long", "rowid = 7", "0", "end", 1, "at or before time 0"),
    ("ends_before_start", "rowid % 400 = 1", "start", "start - 5000", 11, "ending before they start"),
    ("before_launch", f"rowid % 500 = 3 AND correlationId IN (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME)",
     "start - 30000000000", "start - 29999990000", 8, "before the CUDA API call"),
])
def test_absurd_kernels_are_dropped_with_a_count(tmp_path, case, where, start, end, n, reason, capsys):
    path = variant(tmp_path, MFU, case, _copy_kernels(where, start, end))
    assert sql(path, f"SELECT COUNT(*) FROM {KERNEL}")[0][0] == 4010 + n
    trace = load_nsys(path)
    hits = [w for w in trace.warnings if "absurd timestamps" in w and reason in w]
    assert len(hits) == 1 and f"dropped {n} events" in hits[0] and str(path) in hits[0]
    assert_frame_equal(buckets(path), buckets(MFU))
    assert main(["breakdown", str(path), "-f", "json"]) == 0
    assert reason in capsys.readouterr().err


@needs_shared
def test_a_kernel_in_year_2100_is_dropped_like_kineto(tmp_path):
    path = variant(tmp_path, MFU, "far", _copy_kernels("rowid = 9", "start + 4000000000000000000",
                                                        "end + 4000000000000000000"))
    trace = load_nsys(path)
    assert any("dropped 1 events far outside the trace's time span" in w for w in trace.warnings)
    assert_frame_equal(buckets(path), buckets(MFU))


@needs_shared
def test_mostly_reversed_kernels_exit_4_not_6(tmp_path):
    path = variant(tmp_path, MFU, "reversed", [f"UPDATE {KERNEL} SET end = start - 1 WHERE rowid % 4 = 0"])
    with pytest.raises(InvalidTrace, match=r"1002 of \d+ GPU activity rows have impossible timestamps"):
        load_nsys(path)
    rc, out, err = run("breakdown", path)
    assert rc == 4 and out == ""
    one_error_line(err, path, "timestamps are corrupt")


# ------------------------------------------------------------------------------------------------
# 3. truncation, damaged tables, encodings
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    if not MFU.is_file():
        pytest.skip(f"shared nsys traces not found at {NSYS}")
    out = tmp_path_factory.mktemp("nsys_exports")
    paths = {}
    for to, name in (("json", "mfu.json"), ("jsonlines", "mfu.jsonl")):
        paths[to] = out / name
        subprocess.run([sys.executable, str(CONVERT), "convert", str(MFU), "--to", to, "-o", str(paths[to])],
                       check=True)
    return paths


@pytest.mark.parametrize("frac", [0.6, 0.65, 0.7])
def test_truncated_legacy_json_keeps_only_complete_work(exports, tmp_path, frac):
    data = exports["json"].read_bytes()
    path = tmp_path / f"cut{int(frac * 100)}.json"
    path.write_bytes(data[: int(len(data) * frac)])
    trace = load_nsys(path)
    warn = [w for w in trace.warnings if "truncated nsys JSON export" in w]
    assert len(warn) == 1, trace.warnings
    assert trace.meta["truncated"].to_list() == [True, True]
    # independent: the kernels whose launch (same process, correlation) started before the stated
    # cut, or without a launch whose own start is before it, from plain SQL over the original
    s, ns = re.search(r"everything from (\d+)\.(\d{9}) s", warn[0]).groups()
    until = int(s) * 10**9 + int(ns)
    assert 60.1e9 < until < 60.4e9
    want = sql(MFU, f"""
        SELECT k.deviceId, COUNT(*) FROM {KERNEL} k LEFT JOIN (
            SELECT correlationId, globalTid >> 24 AS p, MIN(start) AS t FROM CUPTI_ACTIVITY_KIND_RUNTIME
            GROUP BY 1, 2) r ON r.correlationId = k.correlationId AND r.p = k.globalPid >> 24
        WHERE COALESCE(r.t, k.start) < ? GROUP BY 1 ORDER BY 1""", until)
    got = trace.events.filter(pl.col("kind") == "kernel").group_by("rank").len().sort("rank")["len"].to_list()
    assert got == [n for _, n in want]
    # no kernel launched before the cut is missing: the kept part is complete
    assert sum(got) < 4010


@pytest.mark.parametrize("frac", [0.6, 0.65, 0.7])
def test_truncated_json_lines_exit_4(exports, tmp_path, frac, capsys):
    data = exports["jsonlines"].read_bytes()
    path = tmp_path / f"cut{int(frac * 100)}.jsonl"
    path.write_bytes(data[: int(len(data) * frac)])
    with pytest.raises(InvalidTrace, match="truncated nsys JSON Lines export"):
        load_nsys(path)
    rc, out, err = run("breakdown", path) if frac == 0.6 else run_inproc(capsys, "breakdown", path)
    assert rc == 4 and out == ""
    one_error_line(err, path, "truncated nsys JSON Lines export")


def test_json_lines_cut_inside_a_multibyte_character_is_truncation_not_encoding(tmp_path):
    text = (FIX / "mock_cut.jsonl").read_bytes()
    path = tmp_path / "cut.jsonl"
    path.write_bytes(text + b'{"id":999,"table":"StringIds","value":"caf\xc3')
    with pytest.raises(InvalidTrace, match="truncated nsys JSON Lines export"):
        load_nsys(path)


@pytest.mark.parametrize("name", ["mock_cut.jsonl", "mock_cut.json"])
def test_non_utf8_text_export_exit_4(tmp_path, name, capsys):
    text = (FIX / name).read_bytes()
    i = text.index(b"\n", len(text) // 2) + 1
    path = tmp_path / name
    path.write_bytes(text[:i] + b'{"id":998,"table":"StringIds","value":"\xff\xfe latin-1 \xe9"}\n' + text[i:])
    with pytest.raises(InvalidTrace, match=r"not valid UTF-8 \(byte \d+, line \d+\)"):
        load_nsys(path)
    rc, out, err = run_inproc(capsys, "breakdown", path)
    assert rc == 4 and out == ""
    one_error_line(err, path, "not valid UTF-8")


def test_json_lines_junk_lines_are_counted(tmp_path):
    lines = (FIX / "mfu_2gpu_before_cut.jsonl").read_text().splitlines()
    path = tmp_path / "junk.jsonl"
    path.write_text("\n".join(lines[:10] + ["not json", '{"no_table": 1}'] + lines[10:]) + "\n")
    trace = load_nsys(path)
    assert any("ignored 2 lines that are not JSON table rows" in w for w in trace.warnings)
    assert_frame_equal(trace.events, load_nsys(FIX / "mfu_2gpu_before_cut.jsonl").events)


@pytest.mark.parametrize("fmt,suffix", [("_pqtdir", ".parquet"), ("_arwdir", ".arrow")])
@pytest.mark.parametrize("damage", ["half", "empty", "garbage"])
def test_damaged_table_file_exit_4_naming_it(tmp_path, fmt, suffix, damage, capsys):
    d = tmp_path / f"mfu{fmt}"
    shutil.copytree(FIX / f"mfu_2gpu_before_cut{fmt}", d)
    f = d / f"{KERNEL}{suffix}"
    data = f.read_bytes()
    f.write_bytes({"half": data[: len(data) // 2], "empty": b"", "garbage": b"\x00garbage" * 100}[damage])
    with pytest.raises(InvalidTrace, match="damaged") as e:
        load_nsys(d)
    assert e.value.path == str(f)
    rc, out, err = run_inproc(capsys, "breakdown", d)
    assert rc == 4 and out == ""
    one_error_line(err, f, "damaged")


def test_dangling_table_file_link_is_exit_3(tmp_path):
    d = tmp_path / "mock_pqtdir"
    shutil.copytree(FIX / "mock_cut_pqtdir", d)
    (d / f"{KERNEL}.parquet").unlink()
    (d / f"{KERNEL}.parquet").symlink_to(tmp_path / "gone.parquet")
    with pytest.raises(InputNotFound, match="cannot read") as e:
        load_nsys(d)
    assert e.value.path == str(d / f"{KERNEL}.parquet")


def test_damaged_table_that_is_not_read_does_not_matter(tmp_path):
    d = tmp_path / "mock_pqtdir"
    shutil.copytree(FIX / "mock_cut_pqtdir", d)
    (d / "TARGET_INFO_CUDA_STREAM.parquet").write_bytes(b"PAR1 broken")
    assert_frame_equal(load_nsys(d).events, load_nsys(FIX / "mock_cut_pqtdir").events)


@needs_shared
def test_truncated_sqlite_exit_4(tmp_path, capsys):
    data = MFU.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: int(len(data) * 0.65)])
    with pytest.raises(InvalidTrace):
        load_nsys(path)
    rc, out, err = run_inproc(capsys, "breakdown", path)
    assert rc == 4 and out == ""
    one_error_line(err, path, "SQLite")


# ------------------------------------------------------------------------------------------------
# 5. device names
# ------------------------------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("src,want", [("nsys-ai__mock.sqlite", ["NVIDIA GeForce RTX 3080"]),
                                      ("pipit__perlmutter-cloverleaf-cuda.sqlite", ["NVIDIA A100-SXM4-80GB"])])
def test_target_info_gpu_with_deviceid_column(tmp_path, src, want):
    path = variant(tmp_path, NSYS / src, "devid", ['ALTER TABLE TARGET_INFO_GPU RENAME COLUMN id TO deviceId'])
    ref = load_nsys(NSYS / src).meta
    got = load_nsys(path).meta
    assert got["device_name"].to_list() == ref["device_name"].to_list() == want
    assert_frame_equal(got.drop("file"), ref.drop("file"))


@needs_shared
def test_deviceid_variant_without_cudevice_matches_by_id(tmp_path):
    src = NSYS / "nsys-ai__mock.sqlite"
    keep = [c for c in columns(src, "TARGET_INFO_GPU") if c != "cuDevice"]
    path = variant(tmp_path, src, "nocu", rebuild(src, "TARGET_INFO_GPU", keep) + [
        "ALTER TABLE TARGET_INFO_GPU RENAME COLUMN id TO deviceId", "DROP TABLE TARGET_INFO_CUDA_DEVICE"])
    assert load_nsys(path).meta.select("device_name", "num_sms", "compute_capability").row(0) == (
        "NVIDIA GeForce RTX 3080", 68, "8.6")


@needs_shared
@pytest.mark.parametrize("value", ["''", "'   '", "NULL"])
def test_empty_device_name_gets_a_description(tmp_path, value):
    path = variant(tmp_path, NSYS / "pipit__perlmutter-cloverleaf-cuda.sqlite", "noname",
                   rebuild(NSYS / "pipit__perlmutter-cloverleaf-cuda.sqlite", "TARGET_INFO_GPU",
                           columns(NSYS / "pipit__perlmutter-cloverleaf-cuda.sqlite", "TARGET_INFO_GPU"))
                   + [f"UPDATE TARGET_INFO_GPU SET name = {value}"])
    m = load_nsys(path).meta
    # the kernels run on CUDA device 0, which this export lists as cuDevice 0 = GPU id 3
    assert m.select("device_name", "num_sms").row(0) == ("GPU 0 (name not recorded)", 108)


def test_fixture_without_device_tables_is_described(tmp_path):
    m = load_nsys(FIX / "mfu_2gpu_before_cut.json").meta  # the legacy JSON has no device tables
    assert m["device_name"].to_list() == ["GPU 0 (name not recorded)", "GPU 1 (name not recorded)"]


# ------------------------------------------------------------------------------------------------
# 4. directories: dangling links, loops, unreadable rank files
# ------------------------------------------------------------------------------------------------

def _rank_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ranks"
    d.mkdir()
    shutil.copy(FIX / "mock_cut.sqlite", d / "rank0.sqlite")
    (d / "notes.txt").write_text("not a trace\n")
    return d


def test_dangling_rank_link_is_an_error_naming_it(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "rank1.sqlite").symlink_to("gone.sqlite")
    with pytest.raises(InputNotFound, match="dangling symbolic link") as e:
        discover(d)
    assert e.value.path == str(d / "rank1.sqlite") and e.value.exit_code == 3
    rc, out, err = run("breakdown", d)
    assert rc == 3 and out == ""
    one_error_line(err, d / "rank1.sqlite", "dangling symbolic link")


def test_looping_rank_link_is_an_error_naming_it(tmp_path, capsys):
    d = _rank_dir(tmp_path)
    (d / "a.json").symlink_to("b.json")
    (d / "b.json").symlink_to("a.json")
    with pytest.raises(InputNotFound, match="symbolic link loop") as e:
        discover(d)
    assert e.value.path == str(d / "a.json")
    rc, _, err = run_inproc(capsys, "breakdown", d)
    assert rc == 3
    one_error_line(err, d / "a.json", "symbolic link loop")


def test_dangling_input_path_says_so(tmp_path):
    link = tmp_path / "trace.json"
    link.symlink_to(tmp_path / "missing.json")
    with pytest.raises(InputNotFound, match="dangling symbolic link"):
        discover(link)


def test_unreadable_rank_file_is_an_error_naming_it(tmp_path):
    """Run where file modes bind (as root: without the capabilities that bypass them)."""
    d = _rank_dir(tmp_path)
    (d / "rank0.sqlite").chmod(0)
    code = ("import json, sys; from traceanalyzer.parsers import discover; from traceanalyzer.errors import InputNotFound\n"
            "try:\n    discover(sys.argv[1])\nexcept InputNotFound as e:\n    print(json.dumps([str(e), e.path]))")
    r = run_unprivileged(["-c", code, str(d)])
    assert r.returncode == 0 and r.stdout, r.stderr
    message, path = json.loads(r.stdout)
    assert "permission denied" in message and path == str(d / "rank0.sqlite")


def test_linked_directories_are_not_followed(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "loop").symlink_to("..")
    (d / "loop.json").symlink_to(d)  # a link to a directory, named like a trace
    (d / "notes.txt.json").mkdir()  # a directory named like a trace
    (d / "stray_link").symlink_to("nowhere")  # not named like a trace: not a rank file
    assert discover(d) == [d / "rank0.sqlite"]
    assert_frame_equal(load_nsys(discover(d)[0]).events, load_nsys(FIX / "mock_cut.sqlite").events)
    # a symlinked rank file that resolves is read as before
    (d / "rank1.sqlite").symlink_to(FIX / "mfu_2gpu_before_cut.sqlite")
    assert discover(d) == [d / "rank0.sqlite", d / "rank1.sqlite"]


@pytest.mark.parametrize("to,suffix", [("json", ".json"), ("jsonlines", ".jsonl"), ("parquetdir", "_pqtdir")])
def test_core_columns_only_in_every_format(tmp_path, to, suffix):
    """A kernel table of the core columns only, converted to the other layouts: same frames as SQLite."""
    src = FIX / "mfu_2gpu_before_cut.sqlite"
    db = variant(tmp_path, src, "core", rebuild(src, KERNEL, ["start", "end", "deviceId", "shortName"]))
    out = tmp_path / f"core{suffix}"
    subprocess.run([sys.executable, str(CONVERT), "convert", str(db), "--to", to, "-o", str(out)], check=True)
    got, ref = load_nsys(out), load_nsys(db)
    assert_frame_equal(got.events, ref.events)
    k = ref.events.filter(pl.col("kind") == "kernel")
    assert k.height == 62 and k["correlation"].null_count() == 62 and k["stream"].null_count() == 62


def test_sqlite_cut_in_pages_it_does_not_read_warns(tmp_path):
    """The last page of the fixture holds a table the loader does not read: the answer is complete,
    and a warning says the file was cut (a cut in a table it reads is exit 4, test above)."""
    src = FIX / "mfu_2gpu_before_cut.sqlite"
    data = src.read_bytes()
    path = tmp_path / "cut.sqlite"
    path.write_bytes(data[: len(data) - 2048])
    t = load_nsys(path)
    assert any(f"shorter than its header says ({len(data) - 2048:,} of {len(data):,} bytes)" in w for w in t.warnings)
    assert_frame_equal(t.events, load_nsys(src).events)


# ------------------------------------------------------------------------------------------------
# Hostile values anywhere: never exit 1 or 6, never a traceback
# ------------------------------------------------------------------------------------------------

_JUNK = [None, "x", -1, 0, 2**63 - 1, 1.5, [], {}, True, "123"]


def _mutate(rng, o) -> None:
    if isinstance(o, dict) and o:
        k = rng.choice(sorted(o))
        r = rng.random()
        if r < 0.3:
            del o[k]
        elif r < 0.6 and isinstance(o[k], (dict, list)):
            _mutate(rng, o[k])
        else:
            o[k] = rng.choice(_JUNK)
    elif isinstance(o, list) and o:
        o[rng.randrange(len(o))] = rng.choice(_JUNK)


@pytest.mark.parametrize("seed", range(3))
def test_junk_values_in_every_text_and_sqlite_format(tmp_path, seed, capsys):
    """Random values of the wrong kind (strings, lists, objects, huge numbers, NULLs) in random rows of
    the JSON, JSON Lines and SQLite fixtures: the answer is a result (exit 0, 5) or one error line
    (exit 4), never an internal error."""
    import random

    import orjson

    rng = random.Random(seed)
    values = ["NULL", "'abc'", "-5", "0", "9223372036854775807", "1.5", "x'ff00'"]
    tables = [KERNEL, "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "StringIds"]
    for trial in range(12):
        kind = ("json", "jsonl", "sqlite")[trial % 3]
        src = FIX / f"mfu_2gpu_before_cut.{kind}"
        path = tmp_path / f"t{trial}.{kind}"
        if kind == "sqlite":
            stmts = []
            for _ in range(rng.choice([1, 3])):
                t = rng.choice(tables)
                col = rng.choice(columns(src, t))
                stmts += rebuild(src, t, columns(src, t)) + [
                    f'UPDATE "{t}" SET "{col}" = {rng.choice(values)} WHERE rowid % {rng.choice([1, 2, 7, 50])} = 0']
            path = variant(tmp_path, src, f"t{trial}", stmts)
        else:
            lines = src.read_bytes().splitlines()
            for _ in range(rng.choice([1, 3, 20])):
                i = rng.randrange(1 if kind == "json" else 0, len(lines))
                o = orjson.loads(lines[i])
                _mutate(rng, o)
                lines[i] = orjson.dumps(o)
            path.write_bytes(b"\n".join(lines) + b"\n")
        rc, out, err = run_inproc(capsys, "breakdown", path, "-f", "json")
        assert rc in (0, 4, 5), (path.name, rc, err)
        assert "Traceback" not in err and "internal error" not in err, err
        if rc:
            one_error_line(err, path, "")
