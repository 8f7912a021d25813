"""A saved analysis (``Analysis.save`` / ``ta.load_analysis``, a ``.taz`` file): the analysis read
back holds every frame of the one saved, and every verb, command and the store give from it what
they give from the traces."""

from __future__ import annotations

import dataclasses
import datetime as real_datetime
import hashlib
import io
import os
import shutil
import zipfile
from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from traceanalyzer.analysisfile import FORMAT_VERSION, MIMETYPE, is_saved, read_header
from traceanalyzer.api.loading import resolve
from traceanalyzer.errors import InvalidAnalysisFile, OutputError

from conftest import DLRM, ROOT, TRACES, run_cli, shared_or_skip

H200 = TRACES / "h200" / "base"
CONFIG = ROOT / "docs" / "examples" / "issue1031-70b.toml"
SOURCES = [pytest.param(DLRM, id="dlrm-8rank"), *shared_or_skip([pytest.param(H200, id="h200-base")], "the H200 traces")]


def frames_of(a: ta.Analysis) -> dict[str, pl.DataFrame | None]:
    """Every frame an analysis holds (the trace's, each field's, each optional table's), by name."""
    out: dict[str, pl.DataFrame | None] = {"trace.events": a.trace.events, "trace.meta": a.trace.meta}
    for f in dataclasses.fields(a):
        value = getattr(a, f.name)
        if isinstance(value, pl.DataFrame) or (value is None and f.init and f.name != "options"):
            out[f.name] = value
    out.update({f"extras.{k}": v for k, v in a.extras.items()})
    return out


def assert_same_analysis(a: ta.Analysis, b: ta.Analysis) -> None:
    fa, fb = frames_of(a), frames_of(b)
    assert list(fa) == list(fb)
    for name, df in fa.items():
        if df is None:
            assert fb[name] is None, name
        else:
            assert_frame_equal(df, fb[name], check_exact=True)
    assert b.warnings == a.warnings and b.trace.warnings == a.trace.warnings
    assert b.trace.sources == a.trace.sources
    assert b.options == a.options and type(b.options) is type(a.options)
    assert b.profiler_options == a.profiler_options  # what the findings read of the profiler


@pytest.fixture
def fixed_clock(monkeypatch):
    """The report's ``generated_utc`` at a fixed time, so two reports can be compared byte for byte."""
    import importlib

    document = importlib.import_module("traceanalyzer.views.document")

    class Clock(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return real_datetime.datetime(2026, 11, 20, 12, 0, 0, tzinfo=tz)

    monkeypatch.setattr(document, "datetime", Clock)


@pytest.mark.parametrize("source", SOURCES)
def test_a_loaded_analysis_equals_the_saved_one_and_answers_alike(source, tmp_path, fixed_clock):
    a = ta.analyze(source)
    saved = a.save(tmp_path / "run.taz")
    assert saved == tmp_path / "run.taz" and is_saved(saved)
    b = ta.load_analysis(saved)
    assert_same_analysis(a, b)

    # the verbs: the same frames from the loaded analysis, from the saved path and from the trace
    assert_frame_equal(ta.breakdown(b), ta.breakdown(source))
    assert_frame_equal(ta.breakdown(saved), ta.breakdown(source))
    for fmt, suffix in (("html", "html"), ("json", "json"), ("markdown", "md")):
        ta.report(source, tmp_path / f"trace.{suffix}", format=fmt)
        ta.report(b, tmp_path / f"loaded.{suffix}", format=fmt)
        ta.report(saved, tmp_path / f"path.{suffix}", format=fmt)
        want = (tmp_path / f"trace.{suffix}").read_bytes()
        assert (tmp_path / f"loaded.{suffix}").read_bytes() == want, fmt
        assert (tmp_path / f"path.{suffix}").read_bytes() == want, fmt

    # with optional tables too (per-kernel rows, the integrity facts, launch statistics)
    more = resolve(a, tables=("kernel_rows", "kernel_stats", "trace_facts", "launches"))
    assert more.kernel_stats is not None and set(more.extras) == {"trace_facts", "launches"}
    back = ta.load_analysis(more.save(tmp_path / "more.taz"))
    assert_same_analysis(more, back)
    ta.report(more, tmp_path / "more.html")
    ta.report(back, tmp_path / "back.html")
    assert (tmp_path / "back.html").read_bytes() == (tmp_path / "more.html").read_bytes()


def test_the_header_holds_the_options_and_the_inputs_fingerprints(tmp_path):
    a = ta.analyze(DLRM, comm_kernels=["^my_allreduce"], bus_bw_gbps=50.0)
    saved = a.save(tmp_path / "dlrm.taz")
    h = read_header(saved)
    assert h["format"] == "traceanalyzer.analysis" and h["format_version"] == FORMAT_VERSION == 1
    assert h["traceanalyzer_version"] == ta.__version__
    assert h["options"]["step_name"] == "ProfilerStep" and h["options"]["comm_kernels"] == ["^my_allreduce"]
    assert h["options"]["bus_bw_gbps"] == 50.0 and h["options"]["tables"] == ["events", "gpu"]
    files = sorted(DLRM.iterdir())
    assert [Path(i["path"]) for i in h["inputs"]] == files
    for entry, f in zip(h["inputs"], files):  # computed here independently of the cache
        st = os.stat(f)
        assert (entry["size"], entry["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
        assert entry["sha256"] == hashlib.sha256(f.read_bytes()).hexdigest()
    assert h["frames"]["steps"]["rows"] == 8 and h["frames"]["trace.events"]["rows"] == a.trace.events.height
    assert "kernel_stats" in h["none"]
    # the options come back as the engine's, and a verb that needs a table builds it with them
    b = ta.load_analysis(saved)
    assert b.options.comm_kernels == ("^my_allreduce",) and b.options.tables == frozenset({"events", "gpu"})
    # a ZIP any tool reads: the mimetype member first, stored
    with zipfile.ZipFile(saved) as zf:
        assert zf.namelist()[:2] == ["mimetype", "header.json"] and zf.read("mimetype") == MIMETYPE
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    # the file's bytes depend on the analysis only
    assert a.save(tmp_path / "again.taz").read_bytes() == saved.read_bytes()


def test_compare_and_whatif_take_a_saved_analysis(tmp_path):
    a = ta.analyze(DLRM)
    saved = a.save(tmp_path / "dlrm.taz")
    b = ta.load_analysis(saved)
    one, seven = ta.select(a, ranks=[1]), ta.select(a, ranks=[7])
    seven_saved = seven.save(tmp_path / "r7.taz")
    want = ta.compare(seven, one)
    assert_frame_equal(ta.compare(seven_saved, one), want)
    assert_frame_equal(ta.compare(ta.load_analysis(seven_saved), ta.select(b, ranks=[1])), want)
    assert round(want["diff_ms"].sum(), 3) == 7.392  # the documented gap of rank 1 over rank 7
    assert ta.compare(saved, DLRM)["diff_ms"].abs().max() == 0.0
    sets = ["pp=4", "recompute=selective"]
    w = ta.whatif(CONFIG, sets, source=DLRM)
    assert_frame_equal(ta.whatif(CONFIG, sets, source=saved), w)
    assert_frame_equal(ta.whatif(CONFIG, sets, source=b), w)
    assert w["anchor_source"].to_list() == ["trace", "trace"]
    # load() of a saved analysis: its trace
    assert_frame_equal(ta.load(saved).events, a.trace.events)


def test_the_command_line_takes_a_saved_analysis_where_it_takes_a_trace(tmp_path):
    saved = ta.analyze(DLRM).save(tmp_path / "dlrm.taz")
    for fmt in ("table", "json", "csv"):
        want, got = run_cli("breakdown", DLRM, "-f", fmt), run_cli("breakdown", saved, "-f", fmt)
        assert want.returncode == got.returncode == 0, got.stderr
        assert got.stdout == want.stdout and got.stderr == want.stderr, fmt
    # recognised by its content whatever its name
    plain = shutil.copy(saved, tmp_path / "analysis.bin")
    assert run_cli("breakdown", plain, "-f", "json").stdout == run_cli("breakdown", DLRM, "-f", "json").stdout
    want = run_cli("report", DLRM, "-f", "json", "-o", tmp_path / "a.json")
    got = run_cli("report", saved, "-f", "json", "-o", tmp_path / "b.json")
    assert want.returncode == got.returncode == 0, got.stderr
    da, db = (orjson.loads((tmp_path / n).read_bytes()) for n in ("a.json", "b.json"))
    for d in (da, db):  # what names the command and its time, the rest is the analysis
        d.pop("generated_utc"), d.pop("reproduce")
    assert da == db
    w1 = run_cli("whatif", DLRM, "-c", CONFIG, "--set", "pp=4", "-f", "json")
    w2 = run_cli("whatif", saved, "-c", CONFIG, "--set", "pp=4", "-f", "json")
    assert w1.returncode == w2.returncode == 0 and w1.stdout == w2.stdout
    c1, c2 = run_cli("compare", saved, DLRM, "-f", "json"), run_cli("compare", DLRM, DLRM, "-f", "json")
    assert c1.returncode == c2.returncode == 0 and c1.stdout == c2.stdout
    assert orjson.loads(c1.stdout)["comparison"]["gap_ms"] == 0
    mixed = run_cli("breakdown", saved, DLRM)
    assert mixed.returncode == 2 and mixed.stderr.strip().endswith("a saved analysis is given alone, not with other trace files")


def _rewrite(src: Path, dst: Path, change) -> Path:
    """A copy of the saved file ``src`` with its members passed through ``change(name, bytes)``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info, data)
    return dst


@pytest.fixture(scope="module")
def saved_dlrm(tmp_path_factory):
    return ta.analyze(DLRM).save(tmp_path_factory.mktemp("saved") / "dlrm.taz")


def _bad_files(saved: Path, d: Path) -> dict[str, tuple[Path, str]]:
    """name -> (a file that is not a readable saved analysis, what its one-line error says)."""
    def header(change):
        def f(name, data):
            if name != "header.json":
                return data
            h = orjson.loads(data)
            change(h)
            return orjson.dumps(h)
        return f

    out = {}
    out["a trace named .taz"] = (Path(shutil.copy(DLRM / sorted(os.listdir(DLRM))[0], d / "trace.taz")), "not a saved traceanalyzer analysis")
    other = d / "other.taz"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("notes.txt", "hello")
    out["another zip"] = (other, "not a saved traceanalyzer analysis")
    cut = d / "cut.taz"
    cut.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    out["cut short"] = (cut, "damaged saved analysis")
    flipped = bytearray(saved.read_bytes())
    at = flipped.index(b"PAR1", 200) + 64  # inside the first Parquet member
    flipped[at:at + 16] = bytes(16)
    (d / "flipped.taz").write_bytes(bytes(flipped))
    out["a damaged member"] = (d / "flipped.taz", "damaged saved analysis (frame trace.events")
    out["newer format"] = (_rewrite(saved, d / "newer.taz", header(lambda h: h.update(format_version=FORMAT_VERSION + 1))),
                           f"a saved analysis of format version {FORMAT_VERSION + 1}")
    out["row count"] = (_rewrite(saved, d / "rows.taz", header(lambda h: h["frames"]["steps"].update(rows=9))),
                        "damaged saved analysis (frame steps: 8 rows, the header says 9)")
    out["no header"] = (_rewrite(saved, d / "nohead.taz", lambda n, b: None if n == "header.json" else b), "damaged saved analysis (no header.json)")
    return out


def test_a_file_that_is_not_a_readable_saved_analysis_is_one_line_exit_4(saved_dlrm, tmp_path):
    bad = _bad_files(saved_dlrm, tmp_path)
    for what, (path, says) in bad.items():
        with pytest.raises(InvalidAnalysisFile) as err:
            ta.load_analysis(path)
        assert err.value.exit_code == 4 and err.value.path == str(path), what
        assert str(err.value).startswith(f"{path}: {says}"), (what, str(err.value))
        assert "\n" not in str(err.value)
    assert "upgrade traceanalyzer" in str(pytest.raises(InvalidAnalysisFile, ta.load_analysis, bad["newer format"][0]).value)
    for what in ("a trace named .taz", "cut short", "newer format"):  # the command line: the same line, exit 4
        path, says = bad[what]
        res = run_cli("breakdown", path)
        assert res.returncode == 4, (what, res.stderr)
        assert res.stderr.startswith(f"traceanalyzer: error: {path}: {says}"), res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_saving_refuses_to_overwrite_a_trace_file(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DLRM, run)
    a = ta.analyze(run)
    target = a.trace.sources[0]
    before = target.read_bytes()
    with pytest.raises(OutputError, match="refusing to overwrite an input"):
        a.save(target)
    assert target.read_bytes() == before


def test_an_analysis_without_its_events_or_traces_says_what_it_lacks(tmp_path):
    a = ta.analyze(DLRM)  # what a command's workers keep of a large job: tables, no events; the traces moved away
    gone = dataclasses.replace(a, gpu=a.gpu.clear(), trace=dataclasses.replace(a.trace, events=a.trace.events.clear(),
                                                                              sources=[tmp_path / "gone.json.gz"]))
    saved = gone.save(tmp_path / "compact.taz")
    assert saved.stat().st_size < 100_000
    assert_frame_equal(ta.breakdown(saved), ta.breakdown(DLRM))  # the partition needs no events
    res = run_cli("critical-path", saved)
    assert res.returncode == 4 and res.stderr.count("\n") == 1, res.stderr
    assert f"{saved}: this saved analysis holds no events, gpu table(s)" in res.stderr


def test_the_store_rows_of_a_loaded_analysis_are_those_batch_stores(tmp_path):
    from traceanalyzer.store import Store, run_batch
    from traceanalyzer.store.analyse import store_rows

    run = tmp_path / "runs" / "dlrm" / "2026-11-19"
    shutil.copytree(DLRM, run)
    summary = run_batch([tmp_path / "runs"], tmp_path / "store", workers=1, cache=tmp_path / "cache")
    assert summary.analysed == ["dlrm/2026-11-19"]
    store = Store(tmp_path / "store")
    saved = ta.analyze(run).save(tmp_path / "dlrm.taz")
    steps, ranks, fields = store_rows(ta.load_analysis(saved), "dlrm/2026-11-19", "dlrm")
    assert_frame_equal(steps, store.read("steps").drop("date"), check_exact=True)
    assert_frame_equal(ranks, store.read("ranks").drop("date"), check_exact=True)
    row = store.read("runs").row(0, named=True)
    assert fields == {k: row[k] for k in fields}
    assert steps.height == 8 and steps["duration_ns"].sum() == 128062000
    # written to a store of its own, the same Parquet rows
    from traceanalyzer.store.database import RUN_SCHEMA

    other = Store(tmp_path / "other")
    first = store.read("runs").drop("write_id")
    other.write_run(first.with_columns(pl.lit(None, dtype=pl.String).alias("write_id")).select(list(RUN_SCHEMA)), ranks, steps)
    for table in ("ranks", "steps"):
        files = [sorted((s.root / table).rglob("*.parquet")) for s in (store, other)]
        assert len(files[0]) == len(files[1]) == 1
        a, b = (pl.read_parquet(f[0]).drop("write_id") for f in files)
        assert_frame_equal(a, b, check_exact=True)
