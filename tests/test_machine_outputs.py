"""Outputs for machines: every JSON document validates against the JSON Schema shipped in the
package (named by its ``schema`` key); breakdown as CSV / Parquet; gate as JSON and JUnit XML;
trend as JSON / CSV; batch's summary and exit code; timestamps in UTC."""

from __future__ import annotations

import datetime as dt
import io
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import orjson
import polars as pl
import pytest

from conftest import DEMO, DLRM, FIXTURES, ROOT

jsonschema = pytest.importorskip("jsonschema")

from traceanalyzer import schemas  # noqa: E402
from traceanalyzer.cli import main  # noqa: E402

EX = ROOT / "docs" / "examples"
CFG = EX / "traces" / "mi300x-resnet18-ckpt.toml"
B = FIXTURES / "baselines"
VALIDATED: set[str] = set()


def _cli(capsys, *args) -> tuple[int, bytes, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err.decode() if isinstance(err, bytes) else err


def validate(doc: dict) -> dict:
    """``doc`` against the schema its ``schema`` key names (draft 2020-12, formats checked)."""
    schema = schemas.load(doc["schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)
    VALIDATED.add(doc["schema"])
    return doc


def _json(capsysbinary, *args) -> dict:
    code, out, err = _cli(capsysbinary, *args)
    assert code == 0, err
    return validate(orjson.loads(out))


def test_every_schema_is_a_valid_2020_12_schema_shipped_in_the_package():
    assert len(schemas.SCHEMAS) >= 10
    for sid in schemas.SCHEMAS:
        s = schemas.load(sid)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert s["properties"]["schema"] == {"const": sid} and "schema" in s["required"]
    # shipped as package data
    text = (ROOT / "pyproject.toml").read_text()
    assert '"traceanalyzer.schemas" = ["*.schema.json"]' in text


def test_a_schema_rejects_a_broken_document(capsysbinary):
    doc = _json(capsysbinary, "breakdown", DEMO, "-f", "json", "-q", "--workers", "1")
    bad = orjson.loads(orjson.dumps(doc))
    bad["ranks"][0]["steps"][0]["start_ns"] = 1.5  # integer nanoseconds are a contract
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    del bad["ranks"]
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


@pytest.mark.parametrize("args", [
    [DEMO],
    [DLRM],
    [FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz", "--whole-trace"],
    [FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz", "--whole-trace"],
    [FIXTURES / "kineto" / "v100_resnet50_legacy2021.json.gz", "--whole-trace"],
], ids=["mi300x", "dlrm-8rank", "a100-nosteps", "mi250", "v100-legacy"])
def test_breakdown_json_csv_parquet(args, capsysbinary, tmp_path):
    doc = _json(capsysbinary, "breakdown", *args, "-f", "json", "-q", "--workers", "1")
    code, csv, err = _cli(capsysbinary, "breakdown", *args, "-f", "csv", "-q", "--workers", "1")
    assert code == 0, err
    table = pl.read_csv(io.BytesIO(csv))
    # the same partition as the JSON document, in exact integer nanoseconds
    rows = [(r["rank"], s["step"], round(s["compute_us"] * 1000), round(s["idle_us"] * 1000))
            for r in doc["ranks"] for s in r["steps"]]
    assert sorted(rows) == sorted(table.select("rank", "step", "compute_ns", "idle_ns").iter_rows())
    buckets = ["compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns"]
    assert (table.select(pl.sum_horizontal(buckets)).to_series() == table["duration_ns"]).all()
    assert all(table[c].dtype == pl.Int64 for c in buckets)
    out = tmp_path / "b.parquet"
    code, _, err = _cli(capsysbinary, "breakdown", *args, "-f", "parquet", "-o", out, "-q", "--workers", "1")
    assert code == 0, err
    assert pl.read_parquet(out).equals(table.cast(pl.read_parquet(out).schema))


def test_report_json(capsysbinary):
    _json(capsysbinary, "report", DEMO, "-f", "json", "-q", "--workers", "1")
    doc = _json(capsysbinary, "report", DLRM, "-f", "json", "-q", "--workers", "1")
    assert dt.datetime.fromisoformat(doc["generated_utc"].replace("Z", "+00:00")).utcoffset() == dt.timedelta(0)
    _json(capsysbinary, "report", DEMO, "-c", CFG, "-f", "json", "-q", "--workers", "1")


def test_model_commands_json(capsysbinary):
    _json(capsysbinary, "predict", "-c", EX / "megatron-readme-70b.toml", "-f", "json")
    _json(capsysbinary, "predict", "-c", EX / "issue1031-70b.toml", "--vs", EX / "megatron-readme-70b.toml", "-f", "json")
    _json(capsysbinary, "predict", "-c", EX / "issue1031-70b.toml", "--vs", EX / "megatron-readme-70b.toml",
          "--global-batch", "64", "--global-batch", "256", "-f", "json")
    _json(capsysbinary, "predict", "-c", FIXTURES / "plan" / "bloom_176b.toml", "-f", "json")
    _json(capsysbinary, "plan", "-c", FIXTURES / "plan" / "bloom_176b.toml", "--tokens", "366B", "--tflops", "150", "-f", "json")
    _json(capsysbinary, "plan", "-c", FIXTURES / "plan" / "bloom_176b.toml", "--tokens", "366B", "--mfu", "38-43%",
          "--price-per-gpu-hour", "2", "--gpu-power-w", "700", "--pue", "1.2", "-f", "json")
    _json(capsysbinary, "reconcile", DEMO, "-c", CFG, "-f", "json", "-q", "--workers", "1")
    doc = _json(capsysbinary, "compare", DEMO, DEMO, "-c", CFG, "-f", "json", "-q", "--workers", "1")
    assert doc["mode"] == "waterfall"
    doc = _json(capsysbinary, "compare", DEMO, DLRM, "-f", "json", "-q", "--workers", "1")
    assert doc["mode"] == "time"


def test_baseline_json(capsysbinary):
    _json(capsysbinary, "baseline", B / "all_reduce_perf_h100_2node.txt", "--topo", B / "topo_h100_nv18_8gpu.txt", "-f", "json")
    _json(capsysbinary, "baseline", "--trace", DEMO, "-f", "json", "-q", "--workers", "1")


# --- the store: batch, trend, gate ---------------------------------------------------------------

@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    """Three nights of one job (the third 10 % slower: every kernel stretched) and a broken run."""
    from test_batch import stretch_trace  # the same slowed trace the gate tests use

    root = tmp_path_factory.mktemp("nightly")
    for day in ("2026-11-18", "2026-11-19"):
        (root / f"resnet-{day}").mkdir()
        shutil.copy(DEMO, root / f"resnet-{day}" / DEMO.name)
    (root / "resnet-2026-11-20").mkdir()
    stretch_trace.stretch(DEMO, root / "resnet-2026-11-20" / DEMO.name, factor=1.10)
    (root / "broken-2026-11-20").mkdir()
    (root / "broken-2026-11-20" / "rank0.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    return root


def test_batch_json_exit_code_and_utc(nightly, tmp_path, capsysbinary):
    store = tmp_path / "store"
    code, out, err = _cli(capsysbinary, "batch", nightly, "--store", store, "-f", "json", "-q", "--workers", "1")
    assert code == 9, err  # a run failed: documented exit code, after storing the others
    doc = validate(orjson.loads(out))
    assert sorted(doc["analysed"]) == ["resnet-2026-11-18", "resnet-2026-11-19", "resnet-2026-11-20"]
    assert [f["run_id"] for f in doc["failed"]] == ["broken-2026-11-20"] and doc["failed"][0]["exit_code"] == 4
    assert doc["ok"] is False and doc["runs"] == 4
    line = err.strip().splitlines()[-1]  # after the runs' warnings
    assert line.startswith("traceanalyzer: error: 1 of 4 run(s) failed") and line.endswith(": broken-2026-11-20")
    from traceanalyzer.store.database import Store

    runs = Store(store).runs()
    assert runs.height == 4  # the failed run is stored too, as failed
    assert runs.schema["analysed_at"] == pl.Datetime("us", "UTC")
    now = dt.datetime.now(dt.timezone.utc)
    assert all(dt.timedelta(0) <= now - t < dt.timedelta(minutes=10) for t in runs["analysed_at"])
    finished = dt.datetime.fromisoformat(doc["finished_at"])
    assert finished.utcoffset() == dt.timedelta(0) and abs(now - finished) < dt.timedelta(minutes=10)
    # nothing new: exit 0
    code, out, _ = _cli(capsysbinary, "batch", nightly / "resnet-2026-11-18", "--store", store, "-f", "json", "-q")
    assert code == 0 and validate(orjson.loads(out))["skipped"] == ["resnet-2026-11-18"]


def _store(nightly, tmp_path):
    from traceanalyzer.store import run_batch

    store = tmp_path / "store"
    run_batch([nightly], store, workers=1)
    return store


def test_trend_json_and_csv(nightly, tmp_path, capsysbinary):
    store = _store(nightly, tmp_path)
    doc = _json(capsysbinary, "trend", "--store", store, "-f", "json")
    assert [r["run_id"] for r in doc["rows"]] == ["resnet-2026-11-18", "resnet-2026-11-19", "resnet-2026-11-20"]
    assert doc["metric"] == "step_time" and doc["unit"] == "ms" and doc["rows"][0]["change"] is None
    from traceanalyzer.store.database import Store

    runs = Store(store).runs().filter(pl.col("status") == "ok").sort("date")
    assert [r["value"] for r in doc["rows"]] == pytest.approx((runs["step_time_us"] / 1000).to_list(), rel=1e-12)
    v = [r["value"] for r in doc["rows"]]
    assert doc["rows"][2]["change"] == pytest.approx(v[2] / v[1] - 1, rel=1e-12)
    code, csv, err = _cli(capsysbinary, "trend", "--store", store, "-f", "csv", "--since", "2026-11-19")
    assert code == 0, err
    t = pl.read_csv(io.BytesIO(csv))
    assert t.columns == ["date", "job", "run_id", "value", "change"] and t["run_id"].to_list() == ["resnet-2026-11-19", "resnet-2026-11-20"]
    assert t["value"].to_list() == pytest.approx(v[1:], rel=1e-12)
    # -o writes the chosen format; --plot the PNG
    out, png = tmp_path / "t.json", tmp_path / "t.png"
    code, _, err = _cli(capsysbinary, "trend", "--store", store, "-f", "json", "-o", out, "--plot", png)
    assert code == 0, err
    assert validate(orjson.loads(out.read_bytes()))["rows"] == doc["rows"] and png.read_bytes()[:4] == b"\x89PNG"


def test_trend_by_rank_json_counts_the_slowest_rank_and_the_late_arriver(tmp_path, capsysbinary):
    """Two nights of the 8-rank DLRM job: per rank, the slowest (longest mean step) and the late
    arriver (least exposed communication per step), against breakdown -f json's per-rank totals."""
    for day in ("2026-11-19", "2026-11-20"):
        shutil.copytree(DLRM, tmp_path / "runs" / f"dlrm-{day}")
    code, _, err = _cli(capsysbinary, "batch", tmp_path / "runs", "--store", tmp_path / "store", "-q", "--workers", "1")
    assert code == 0, err
    doc = _json(capsysbinary, "trend", "--store", tmp_path / "store", "--by", "rank", "--last", "5", "-f", "json")
    assert doc["last"] == 5 and doc["job"] is None
    ranks = _json(capsysbinary, "breakdown", DLRM, "-f", "json")["ranks"]
    mean = {r["rank"]: r["total"]["duration_us"] / r["total"]["steps"] for r in ranks}
    comm = {r["rank"]: r["total"]["exposed_comm_us"] / r["total"]["steps"] for r in ranks}
    slowest = min(mean, key=lambda r: (-mean[r], r))
    late = min(comm, key=lambda r: (comm[r], r))
    rows = {r["rank"]: r for r in doc["rows"]}
    assert sorted(rows) == sorted(mean) and {r["out_of"] for r in doc["rows"]} == {2} and {r["runs"] for r in doc["rows"]} == {2}
    assert [r for r in rows if rows[r]["slowest"]] == [slowest] and rows[slowest]["slowest"] == 2
    assert [r for r in rows if rows[r]["late_arriver"]] == [late] and rows[late]["late_arriver"] == 2
    assert doc["rows"][0]["rank"] in (slowest, late) and doc["rows"][0]["either"] == 2
    assert all(r["host"] is None for r in doc["rows"])  # batch rows carry no host
    assert rows[0]["mean_step_time_ms"] == pytest.approx(mean[0] / 1000, rel=1e-12)


def test_gate_json_and_junit(nightly, tmp_path, capsysbinary):
    store = _store(nightly, tmp_path)
    junit = tmp_path / "gate.xml"
    code, out, err = _cli(capsysbinary, "gate", "--store", store, "--job", "resnet", "-f", "json", "--junit", junit)
    assert code == 8, err  # night 3 is slower than 3 %
    doc = validate(orjson.loads(out))
    [res] = doc["results"]
    assert doc["passed"] is False and res["passed"] is False and res["latest"] == "resnet-2026-11-20"
    assert res["baseline"] == "resnet-2026-11-19" and res["change"] > 0.03
    assert dt.datetime.fromisoformat(doc["checked_at"]).utcoffset() == dt.timedelta(0)
    _check_junit(junit, {"resnet": res["message"]})
    # a looser threshold passes: exit 0, a passing test case
    code, out, err = _cli(capsysbinary, "gate", "--store", store, "--job", "resnet", "--max-regression", f"{100 * res['change'] + 1:.1f}%",
                          "-f", "json", "--junit", junit)
    assert code == 0, err
    assert validate(orjson.loads(out))["passed"] is True
    _check_junit(junit, {"resnet": None})


def _check_junit(path: Path, expect: dict[str, str | None]) -> None:
    """What the JUnit XML schema (the Jenkins / Ant one CI systems read) requires: testsuite with
    name, tests, failures, errors (integers that match its testcases); testcase with name and
    classname; failure with a message."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    for attr in ("name", "tests", "failures", "errors", "time", "timestamp"):
        assert attr in suite.attrib, attr
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == len(expect)
    assert int(suite.get("failures")) == sum(m is not None for m in expect.values())
    assert int(suite.get("errors")) == 0 and float(suite.get("time")) >= 0
    assert dt.datetime.fromisoformat(suite.get("timestamp")).utcoffset() == dt.timedelta(0)
    for case in cases:
        assert case.get("classname") == "traceanalyzer.gate" and float(case.get("time")) >= 0
        fail = case.find("failure")
        if expect[case.get("name")] is None:
            assert fail is None
        else:
            assert fail is not None and fail.get("message") == expect[case.get("name")] and fail.get("type") == "regression"


def test_every_schema_was_exercised():
    """Runs last in this module (pytest keeps file order): each shipped schema validated a real
    document above (under xdist the module's tests may be split: then it only checks its own); the
    views' schemas (kernels, ops, ..., whatif) are exercised in test_machine_outputs_views.py."""
    from test_machine_outputs_views import NEW as VIEWS

    if len(VALIDATED) < 3:
        pytest.skip("the other tests of this module ran in another worker")
    assert set(schemas.SCHEMAS) - set(VIEWS) == VALIDATED


def test_a_panic_in_one_rank_fails_that_run_only(tmp_path, capsysbinary, monkeypatch):
    """A native panic (polars raises a BaseException) while analysing one run's rank file fails
    that run with exit code 1 and a line naming the file; the batch goes on and stores the rest."""
    import traceanalyzer.engine.rank as rank_mod

    class FakePanic(BaseException):  # what pyo3's PanicException is: not an Exception
        pass

    root = tmp_path / "nightly"
    for run in ("good-2026-11-20", "panics-2026-11-20"):
        (root / run).mkdir(parents=True)
        shutil.copy(DEMO, root / run / DEMO.name)
    real = rank_mod.classify_ranks

    def classify(events, meta, opts, source, results):
        if "panics-" in source:
            raise FakePanic("called `Option::unwrap()` on a `None` value")
        return real(events, meta, opts, source, results)

    monkeypatch.setattr(rank_mod, "classify_ranks", classify)
    code, out, err = _cli(capsysbinary, "batch", root, "--store", tmp_path / "store", "-f", "json", "-q", "--workers", "1")
    assert code == 9, err
    doc = validate(orjson.loads(out))
    assert doc["analysed"] == ["good-2026-11-20"]
    [failed] = doc["failed"]
    assert failed["run_id"] == "panics-2026-11-20" and failed["exit_code"] == 1
    assert "FakePanic" in failed["error"] and DEMO.name in failed["error"] and "please report it" in failed["error"]
