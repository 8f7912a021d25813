from __future__ import annotations

import orjson
import pytest
import polars as pl

import traceanalyzer as ta
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.parsers import decoder
from traceanalyzer.render.json import steps_frame

from conftest import DEMO, DLRM, FIXTURES, run_cli


def test_version_and_help():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"traceanalyzer {ta.__version__} (Kineto decoder: {decoder.name()})"
    r = run_cli("breakdown", "--help")
    assert r.returncode == 0 and "--format" in r.stdout and "--output" in r.stdout
    r = run_cli("--help")
    assert "Exit codes" in r.stdout


def test_breakdown_table_on_the_demo_trace():
    r = run_cli("breakdown", DEMO)
    assert r.returncode == 0, r.stderr
    assert "compute" in r.stdout and "AMD Instinct MI300X" in r.stdout
    assert "Traceback" not in r.stderr


def test_breakdown_json_contract_and_numbers_match_the_api(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli("breakdown", DLRM, "--format", "json", "--output", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    doc = orjson.loads(out.read_bytes())
    assert doc["schema_version"] == 1
    assert [x["rank"] for x in doc["ranks"]] == list(range(8))
    step = doc["ranks"][0]["steps"][0]
    for key in ["step", "start_us", "duration_us", "compute_us", "recompute_us", "exposed_comm_us",
                "overlapped_comm_us", "other_us", "idle_us"]:
        assert key in step
    assert set(doc["ranks"][0]["total"]) >= {"duration_us", "idle_us", "steps"}
    api = ta.breakdown(ta.load(DLRM)).sort("rank")
    got = steps_frame(doc).sort("rank")
    assert got["idle_us"].to_list() == api["idle_us"].to_list()
    assert isinstance(doc["warnings"], list)


def test_json_to_stdout_is_pure_json():
    r = run_cli("breakdown", DEMO, "-f", "json")
    assert r.returncode == 0
    doc = orjson.loads(r.stdout)
    assert doc["ranks"][0]["device"] == "AMD Instinct MI300X"


def test_errors_are_one_line_with_documented_exit_codes(tmp_path):
    cases = []
    r = run_cli("breakdown", tmp_path / "missing.json")
    cases.append((r, 3, "no such file"))
    (tmp_path / "empty").mkdir()
    r = run_cli("breakdown", tmp_path / "empty")
    cases.append((r, 3, "no trace files"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = run_cli("breakdown", bad)
    cases.append((r, 4, "not valid JSON"))
    r = run_cli("breakdown", FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz")
    cases.append((r, 5, "no GPU activity"))
    r = run_cli("breakdown", DEMO, "--format", "yaml")
    cases.append((r, 2, "Invalid value"))
    for r, code, msg in cases:
        assert r.returncode == code, (r.returncode, r.stderr)
        assert msg in r.stderr
        assert "Traceback" not in r.stderr
    for r, code, _ in cases[:4]:
        assert len(r.stderr.strip().splitlines()) == 1


def test_truncated_trace_succeeds_with_a_warning(tmp_path):
    import gzip

    raw = gzip.open(DEMO).read()
    cut = tmp_path / "rank0.json"
    cut.write_bytes(raw[: int(len(raw) * 0.95)])  # Kineto writes GPU events after 75%
    r = run_cli("breakdown", cut, "-f", "json")
    assert r.returncode == 0, r.stderr
    assert "truncated" in r.stderr
    doc = orjson.loads(r.stdout)
    assert any("truncated" in w for w in doc["warnings"])
    assert len(doc["ranks"][0]["steps"]) >= 1


def test_missing_compiled_decoder_is_said_once(monkeypatch, capsys):
    """Without the compiled decoder (an install without a C compiler) and no choice made, one
    line on stderr says the Python decoder runs, once per process; a choice made silences it."""
    monkeypatch.setattr(decoder, "_module", None)
    monkeypatch.setattr(decoder, "_loaded", True)
    monkeypatch.delenv("TRACEANALYZER_DECODER", raising=False)
    monkeypatch.delenv(decoder._QUIET, raising=False)
    capsys.readouterr()
    assert decoder.native() is None and decoder.native() is None
    assert capsys.readouterr().err == decoder.NOTICE + "\n"
    assert decoder.name() == "python (compiled decoder not built)"
    monkeypatch.setenv("TRACEANALYZER_DECODER", "native")  # chosen but missing: a usage error
    with pytest.raises(TraceAnalyzerError) as exc:
        decoder.native()
    assert exc.value.exit_code == 2
