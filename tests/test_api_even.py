"""The Python API is even: a verb's frame has the same columns and dtypes whatever the input,
with or without the thing it counts, so that the frames of two jobs concatenate."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import InvalidArgument, InvalidTrace

from conftest import DLRM, ROOT, TRACES, needs_shared

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"


@needs_shared()
@pytest.mark.parametrize("per", ["rank", "step"])
@pytest.mark.parametrize("by", ["type", "group", "dim"])
def test_comm_has_one_schema_with_or_without_collectives(per, by):
    none = ta.comm(SMALL, by=by, per=per)  # a single-GPU run: no collective
    some = ta.comm(DLRM, by=by, per=per)   # 8 ranks of all_to_all and all_reduce
    assert none.height == 0 and some.height > 0
    assert none.schema == some.schema
    both = pl.concat([none, some])
    assert both.height == some.height and both.columns[: 3 if per == "step" else 2] == (["rank", "step", "key"] if per == "step" else ["rank", "key"])


@pytest.mark.parametrize("call,param", [
    (lambda a: ta.analyze({"a": 1}), "source"),
    (lambda a: ta.compare(a, 7), "b"),
    (lambda a: ta.compare(7, a), "a"),
    (lambda a: ta.report(a, rank="0"), "rank"),
    (lambda a: ta.whatif(ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml", 5), "sets"),
], ids=["analyze-dict", "compare-b", "compare-a", "report-rank-str", "whatif-sets-int"])
def test_a_wrong_argument_is_an_invalid_argument_naming_the_parameter(call, param, demo_analysis):
    with pytest.raises(InvalidArgument) as err:
        call(demo_analysis)
    assert str(err.value).startswith(f"{param}: ")


@pytest.fixture(scope="module")
def demo_analysis():
    from conftest import DEMO

    return ta.analyze(DEMO)


def test_an_event_field_that_is_an_object_is_named(tmp_path):
    """A kernel whose name is an object: the error names the field and the event, not the value."""
    import gzip
    import json

    from conftest import DEMO

    doc = json.loads(gzip.decompress(DEMO.read_bytes()))
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][i]["name"] = {"a": {"b": 1}}
    bad = tmp_path / "objname.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InvalidTrace) as err:
        ta.load(bad)
    assert str(err.value) == f"{bad}: malformed events: event {i} ('ph': 'X') has an object for 'name' (a string is expected)"
