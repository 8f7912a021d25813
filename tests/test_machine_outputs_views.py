"""The views' JSON documents (kernels, ops, annotations, launches, critical-path, memory, whatif,
whatif --search) name their schema and validate against it on the bundled traces and example
configurations; each schema rejects a broken copy of a real document. ``annotate`` writes the
Chrome trace format (no ``schema`` key): the one documented exception."""

from __future__ import annotations

import copy
import gzip

import orjson
import pytest

from conftest import DEMO, DLRM, ROOT

jsonschema = pytest.importorskip("jsonschema")

from traceanalyzer import schemas  # noqa: E402
from traceanalyzer.cli import main  # noqa: E402

EX = ROOT / "docs" / "examples"
CFG = EX / "traces" / "mi300x-resnet18-ckpt.toml"
LEGACY = DEMO.parent / "v100_resnet50_legacy2021.json.gz"  # has [memory] events
Q = ["-q"]
W = ["-q", "--workers", "1"]

#: (case id) -> (schema id, command line without -f / -o)
CASES: dict[str, tuple[str, list]] = {
    "kernels-dlrm": ("traceanalyzer.kernels", ["kernels", DLRM, *W]),
    "kernels-mi300x-top": ("traceanalyzer.kernels", ["kernels", DEMO, "--top", "5", "--rank", "0", *W]),
    "ops-mi300x": ("traceanalyzer.ops", ["ops", DEMO, *W]),
    "ops-dlrm-top": ("traceanalyzer.ops", ["ops", DLRM, "--top", "5", *W]),
    "annotations-mi300x-step": ("traceanalyzer.annotations", ["annotations", DEMO, *W]),
    "annotations-mi300x-rank-gpu": ("traceanalyzer.annotations", ["annotations", DEMO, "--by", "rank", "--source", "gpu", *W]),
    "annotations-dlrm-name": ("traceanalyzer.annotations", ["annotations", DLRM, "--by", "name", *W]),
    "launches-dlrm-steps": ("traceanalyzer.launches", ["launches", DLRM, *W]),
    "launches-mi300x-queue": ("traceanalyzer.launches", ["launches", DEMO, "--view", "queue", *W]),
    "launches-mi300x-kernels": ("traceanalyzer.launches", ["launches", DEMO, "--view", "kernels", *W]),
    "launches-mi300x-series": ("traceanalyzer.launches", ["launches", DEMO, "--view", "queue-series", *W]),
    "critical-path-dlrm": ("traceanalyzer.critical_path", ["critical-path", DLRM, *Q]),
    "stragglers-dlrm": ("traceanalyzer.stragglers", ["stragglers", DLRM, *W]),
    "critical-path-mi300x-rank": ("traceanalyzer.critical_path", ["critical-path", DEMO, "--rank", "0", *Q]),
    "memory-config": ("traceanalyzer.memory", ["memory", "-c", EX / "megatron-readme-70b.toml"]),
    "memory-trace": ("traceanalyzer.memory", ["memory", DEMO]),
    "memory-trace-config": ("traceanalyzer.memory", ["memory", LEGACY, "-c", EX / "issue1031-70b.toml"]),
    "whatif-config": ("traceanalyzer.whatif", ["whatif", "-c", EX / "megatron-readme-70b.toml", "--set", "tp=4"]),
    "whatif-trace": ("traceanalyzer.whatif", ["whatif", DEMO, "-c", CFG, "--set", "dp=2", *W]),
    "whatif-search": ("traceanalyzer.whatif_search", ["whatif", "-c", EX / "megatron-readme-70b.toml", "--search", "--top", "3"]),
    "whatif-search-pinned": ("traceanalyzer.whatif_search", ["whatif", "-c", EX / "issue1031-70b.toml", "--search", "--set", "pp=2", "--top", "0"]),
}
NEW = sorted({sid for sid, _ in CASES.values()})


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """Each case's document, written with -o (run once per module, on demand)."""
    root, done = tmp_path_factory.mktemp("views"), {}

    def get(case: str) -> dict:
        if case not in done:
            out = root / f"{case}.json"
            code = main([str(a) for a in [*CASES[case][1], "-f", "json", "-o", out]])
            assert code == 0, case
            done[case] = orjson.loads(out.read_bytes())
        return copy.deepcopy(done[case])
    return get


def validate(doc: dict) -> None:
    schema = schemas.load(doc["schema"])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(doc)


def test_the_new_schemas_are_shipped():
    assert set(NEW) <= set(schemas.SCHEMAS)


@pytest.mark.parametrize("case", list(CASES))
def test_view_json_validates(case, documents):
    sid, args = CASES[case]
    doc = documents(case)
    assert doc["schema"] == sid and doc["schema_version"] == 1
    validate(doc)
    command = args[0]
    if command in ("kernels", "ops", "annotations"):
        assert doc["rows"], case
    if command == "launches":  # the view's table, one row at least
        view = {"steps": "steps", "queue": "queue", "kernels": "kernels", "queue-series": "queue_series"}[doc["view"]]
        assert doc[view] and doc["command"] == "launches"
    if command == "critical-path":
        assert doc["summary"] and doc["segments"]
        # the path's pieces add up to its length, step by step (integer ns)
        by_step: dict = {}
        for s in doc["segments"]:
            by_step[(s["step"], s["rank"] if doc["summary"][0]["rank"] is not None else None)] = by_step.get(
                (s["step"], s["rank"] if doc["summary"][0]["rank"] is not None else None), 0) + s["dur_ns"]
        assert {(r["step"], r["rank"]): r["path_ns"] for r in doc["summary"]} == by_step
    if command == "stragglers":  # the replay gives back the measured steps; rank 7 made the others wait
        assert all(abs(r["replayed_ms"] - r["measured_ms"]) <= 0.01 * r["measured_ms"] for r in doc["replay"])
        assert doc["ranks"][0]["rank"] == 7 and doc["ranks"][0]["role"] == "made others wait"
    if command == "memory":
        assert (doc["predicted"] is None) == ("-c" not in args)
        if "timeline" in doc:  # column-wise: every column as long as the others
            assert len({len(v) for v in doc["timeline"].values()}) == 1
        if args[1] == LEGACY:
            assert doc["measured"] and doc["fit"]["measured_peak_allocated"] == doc["measured"][0]["peak_allocated"]
    if sid == "traceanalyzer.whatif_search":
        # ranked 1, 2, ... among the layouts that fit (or cannot be sized); null for those that do not fit
        ranked = [r["rank"] for r in doc["layouts"] if r["rank"] is not None]
        assert ranked == list(range(1, len(ranked) + 1))
        assert all((r["rank"] is None) == (r["fits"] is False) for r in doc["layouts"])


#: one way per schema to break a real document the way a bug would (a float where integer ns are
#: promised, a missing table, a wrong type)
BREAK = {
    "kernels-dlrm": lambda d: d["rows"][0].__setitem__("total_ns", d["rows"][0]["total_ns"] + 0.5),
    "ops-mi300x": lambda d: d["rows"][0].pop("gpu_ns"),
    "annotations-mi300x-step": lambda d: d["rows"][0].pop("step"),  # --by step rows name their step
    "launches-dlrm-steps": lambda d: d.pop("steps"),
    "critical-path-dlrm": lambda d: d["segments"][0].__setitem__("start_ns", str(d["segments"][0]["start_ns"])),
    "stragglers-dlrm": lambda d: d["costs"][0].__setitem__("phase", "late"),
    "memory-trace-config": lambda d: d["timeline"]["ts_ns"].__setitem__(0, 1.5),
    "whatif-config": lambda d: d["predicted"]["layout"].__setitem__("tp", "4"),
    "whatif-search": lambda d: d["layouts"][0].pop("tflops_per_gpu"),
}


@pytest.mark.parametrize("case", list(BREAK))
def test_view_schema_rejects_a_broken_document(case, documents):
    doc = documents(case)
    validate(doc)
    BREAK[case](doc)
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    wrong = documents(case)
    wrong["schema_version"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate(wrong)


def test_every_new_schema_has_a_negative_test():
    assert sorted({CASES[c][0] for c in BREAK}) == NEW


def test_compare_kernel_diff_is_allowed_by_compares_schema(capsysbinary):
    code = main([str(a) for a in ["compare", DEMO, DLRM, "-f", "json", *W]])
    out, err = capsysbinary.readouterr()
    assert code == 0, err
    doc = orjson.loads(out)
    assert doc["schema"] == "traceanalyzer.compare" and "kernels" in doc["comparison"]
    validate(doc)


def test_annotate_writes_the_chrome_trace_format_without_a_schema_key(tmp_path):
    out = tmp_path / "annotated.json.gz"
    assert main([str(a) for a in ["annotate", DEMO, "-o", out, "-q"]]) == 0
    with gzip.open(out) as fh:
        doc = orjson.loads(fh.read())
    assert "traceEvents" in doc and "schema" not in doc
