"""Every JSON document a trace command writes validates against its shipped schema, on every
shared trace and every bundled fixture (one test per input, so that ``-n`` spreads them).

A trace with nothing to analyse (a CPU-only profile, a CUPTI range-profiler trace; ``memory`` of
a trace without memory events) answers exit 5 and writes no document: that is the documented
answer, never a document that breaks its schema."""

from __future__ import annotations

import orjson
import pytest

from conftest import FIXTURES, TRACES, shared_or_skip

jsonschema = pytest.importorskip("jsonschema")

from traceanalyzer import schemas  # noqa: E402
from traceanalyzer.cli import main  # noqa: E402

#: the commands that take a trace and write one JSON document
COMMANDS = ["breakdown", "report", "kernels", "ops", "launches", "memory", "annotations", "critical-path"]
_SUFFIXES = (".json.gz", ".json", ".jsonl", ".sqlite")


def _inputs() -> list:
    fixtures = sorted(p for p in (FIXTURES / "kineto").iterdir() if p.is_file())
    fixtures += [FIXTURES / "kineto" / "dlrm-v100-8rank"]
    fixtures += sorted(p for p in (FIXTURES / "nsys").iterdir())
    shared = []
    if TRACES.exists():
        shared = sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name.endswith(_SUFFIXES) and p.name != "truth.json")
        shared += [TRACES / "kineto-public" / "param-dlrm-v100-8rank", TRACES / "h200" / "small"]  # folders: one job
    params = [pytest.param(p, id=str(p.relative_to(FIXTURES.parent))) for p in fixtures]
    params += [pytest.param(p, id=str(p.relative_to(TRACES))) for p in shared]
    return params if TRACES.exists() else [*params, *shared_or_skip([])]


def _run(capsysbinary, *args) -> tuple[int, bytes, str]:
    code = main([str(a) for a in args])
    out, err = capsysbinary.readouterr()
    return code, out, err.decode()


def _valid(doc: dict, what: str) -> None:
    schema = schemas.load(doc["schema"])
    errors = sorted(jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    assert not errors, f"{what}: " + "; ".join(f"{list(e.absolute_path)}: {e.message[:120]}" for e in errors[:3])


@pytest.mark.parametrize("path", _inputs())
def test_every_json_output_validates(path, capsysbinary):
    if path.name == "absent":
        pytest.skip("shared traces absent")
    validated = 0
    for cmd in [*COMMANDS, "compare"]:
        args = [cmd, path, *([path] if cmd == "compare" else []), "-f", "json", "-q"]
        code, out, err = _run(capsysbinary, *args)
        assert code in (0, 5), f"{cmd} {path}: exit {code}: {err[-300:]}"
        if code == 5:  # nothing to analyse: one line, no document
            assert out == b"" and len(err.strip().splitlines()) == 1, (cmd, err)
            continue
        _valid(orjson.loads(out), f"{cmd} {path.name}")
        validated += 1
    if validated:  # a trace with GPU work gets every document but memory's at least
        assert validated >= len(COMMANDS), (path, validated)


def test_a_single_gpu_trace_reports_world_size_1(capsysbinary):
    """One rank file without distributedInfo: a process without torch.distributed, world size 1;
    the 8 rank files of the DLRM fixture keep their distributedInfo's 8."""
    h200 = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"
    if not h200.exists():
        pytest.skip("shared traces absent")
    raw = orjson.loads(__import__("gzip").decompress(h200.read_bytes()))
    assert "distributedInfo" not in raw
    code, out, err = _run(capsysbinary, "report", h200, "-f", "json", "-q")
    assert code == 0, err
    assert orjson.loads(out)["job"]["world_size"] == 1
    code, out, err = _run(capsysbinary, "report", FIXTURES / "kineto" / "dlrm-v100-8rank", "-f", "json", "-q")
    assert code == 0 and orjson.loads(out)["job"]["world_size"] == 8
