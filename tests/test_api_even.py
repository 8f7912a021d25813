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


# --- every frame verb: one schema whatever the input -------------------------------------------

K = ROOT / "fixtures" / "kineto"
ALEX = K / "a100_alexnet_nosteps.json.gz"  # one A100, no collective, no step range
V100 = K / "v100_resnet50_legacy2021.json.gz"  # one V100, six steps, no annotation
CONFIG = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
NONE = "^no such name$"


@pytest.fixture(scope="module")
def analyses():
    from conftest import DEMO

    return {"dlrm": ta.analyze(DLRM), "demo": ta.analyze(DEMO), "alex": ta.analyze(ALEX), "v100": ta.analyze(V100)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding the DLRM job (one run)."""
    root = tmp_path_factory.mktemp("store")
    summary = ta.batch([DLRM], root / "store", workers=1, cache=False)
    assert summary.analysed == ["dlrm-v100-8rank"]
    return root / "store"


#: (verb and options, the call, the input with rows, the other input (and options), whether the
#: other's frame is empty): every DataFrame-returning verb, each of its row layouts. Where no input gives an empty
#: frame (every trace has steps, a comparison has its terms), the other input is another job:
#: one rank instead of eight, without collectives or step ranges.
SCHEMA_CASES = [
    *[(f"breakdown-{per}", lambda a, per=per: ta.breakdown(a, per=per), "dlrm", "alex", False) for per in ("step", "rank")],
    ("rank_summary", ta.rank_summary, "dlrm", "alex", False),
    *[(f"comm-{by}-{per}", lambda a, by=by, per=per: ta.comm(a, by=by, per=per), "dlrm", "alex", True)
      for by in ("type", "group", "dim") for per in ("step", "rank")],
    *[(f"idle-{per}", lambda a, per=per: ta.idle(a, per=per), "dlrm", "alex", False) for per in ("step", "rank")],
    *[(f"stragglers-{per}", lambda a, per=per: ta.stragglers(a, per=per), "dlrm", "alex", True)
      for per in ("rank", "rank_step", "step")],
    ("compare", lambda a: ta.compare(a, a), "dlrm", "alex", False),
    ("kernels", lambda a: ta.kernels(a), "dlrm", "alex", False),
    ("kernels-no-match", lambda a, **kw: ta.kernels(a, **kw), "dlrm", ("dlrm", {"name": NONE}), True),
    ("ops-no-match", lambda a, **kw: ta.ops(a, **kw), "demo", ("demo", {"name": NONE}), True),
    ("kernel_diff", lambda a: ta.kernel_diff(a, a), "dlrm", "alex", False),
    *[(f"annotations-{per}", lambda a, per=per: ta.annotations(a, per=per), "demo", "v100", True) for per in ("step", "rank", "name")],
    *[(f"annotations-{per}-config", lambda a, per=per: ta.annotations(a, per=per, config=CONFIG), "demo", "v100", True)
      for per in ("step", "rank", "name")],
    ("annotations-no-match", lambda a, **kw: ta.annotations(a, side="host", **kw), "demo", ("demo", {"name": NONE}), True),
    *[(f"launches-{per}", lambda a, per=per: ta.launches(a, per=per), "dlrm", "alex", False) for per in ("step", "kernel")],
    *[(f"queue_length-{s}", lambda a, s=s: ta.queue_length(a, series=s), "dlrm", "alex", False) for s in (False, True)],
    ("replay", ta.replay, "dlrm", "alex", False),
    ("straggler_costs", ta.straggler_costs, "dlrm", "alex", False),
    ("wait_matrix", ta.wait_matrix, "dlrm", "alex", True),
    ("comm_bytes", lambda a: ta.comm_bytes(a, CONFIG), "demo", "alex", False),
]


@pytest.mark.parametrize("label,call,full,other,empty", SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
def test_every_frame_has_one_schema_whatever_the_input(label, call, full, other, empty, analyses):
    other, options = other if isinstance(other, tuple) else (other, {})
    some, none = call(analyses[full]), call(analyses[other], **options)
    assert some.height > 0
    if empty:
        assert none.height == 0
    assert list(none.schema.items()) == list(some.schema.items())  # names and dtypes, in order
    assert pl.concat([some, none]).height == some.height + none.height


def test_stragglers_per_step_of_one_rank_has_the_columns_of_a_job(analyses):
    """Before: 9 columns for one rank, 12 for a job (no ``durations``, ``waited_on_*``)."""
    one = ta.stragglers(analyses["alex"], per="step")
    job = ta.stragglers(analyses["dlrm"], per="step")
    assert one.width == job.width == 12 and one.columns[-3:] == ["durations", "waited_on_rank", "waited_on_wait_ns"]
    # a job's row: step 10 of the 8 ranks, the slowest rank's duration the max of the breakdown's
    b = ta.breakdown(analyses["dlrm"])
    assert job.select("step", "ranks", "max_ns").row(0) == (10, 8, b["duration_ns"].max())


def test_the_layout_models_have_one_schema():
    cfg = ROOT / "docs" / "examples" / "issue1031-70b.toml"
    a, b = ta.whatif(cfg, ["pp=4"]), ta.whatif(cfg, {"recompute": "selective"})
    assert list(a.schema.items()) == list(b.schema.items()) and a.height == b.height == 2
    s = ta.search_layouts(cfg, ["micro_batch=1"], top=1)
    t = ta.search_layouts(cfg, ["micro_batch=2"], top=1)
    assert list(s.schema.items()) == list(t.schema.items()) and s.height and t.height


def test_the_store_frames_have_one_schema(store):
    # a trend has a row per run (no run of a job, or since a date, is an InputNotFound): per metric
    step, comm = ta.trend(store), ta.trend(store, metric="exposed_comm")
    assert step.height == comm.height == 1 and list(step.schema.items()) == list(comm.schema.items())
    every, one = ta.gate(store), ta.gate(store, job="dlrm-v100-8rank")
    assert every.height == one.height == 1 and list(every.schema.items()) == list(one.schema.items())
    assert one.select("job", "passed", "latest").row(0)[:2] == ("dlrm-v100-8rank", True)  # its first run: no reference


# --- every verb: a wrong-typed argument is an InvalidArgument naming it --------------------------

#: the smallest arguments each verb takes (never read: the argument checks come first)
REQUIRED = {
    "compare": {"a": DLRM, "b": DLRM}, "kernel_diff": {"a": DLRM, "b": DLRM},
    "comm_bytes": {"source": DLRM, "config": CONFIG}, "whatif": {"config": CONFIG, "sets": ["pp=2"]},
    "search_layouts": {"config": CONFIG}, "plan": {"tokens": "1T"}, "batch": {"roots": DLRM, "store": "store"},
    "trend": {"store": "store"}, "gate": {"store": "store"}, "load": {"path": DLRM}, "scan": {"path": DLRM},
    "load_analysis": {"path": DLRM},
    "annotate": {"source": DLRM, "output": "out.json"}, "predict": {"config": CONFIG},
}

#: a value of the wrong type for each argument name (as a user might pass it by mistake)
WRONG = {
    "source": 42, "a": 7, "b": {"a": 1}, "path": 3.5, "roots": 1, "store": 2, "files": 3, "topo": 4, "output": 5,
    "step_range": 10, "recompute_range": 1, "comm_kernels": "nccl", "bus_bw_gbps": "100", "cache": 1, "workers": "4",
    "engine": 1, "address": 1, "quiet": "no", "force": "yes", "gpu_only": 1, "ranks": "0", "steps": 1.5, "rank": "0",
    "step": "10", "per": 1, "by": 2, "series": "yes", "show_ranks": True, "name": 3, "level": "1", "side": 1,
    "sort": 1, "top": "3", "precision": 16, "threshold": "0.1", "tolerance": "5%", "format": 1, "merge": "yes",
    "infer_waits": 1, "wait_slack_ns": 1.5, "host_gaps": "no", "config": 3, "megatron_args": 4, "vs": 5, "sets": 5,
    "baseline": 6, "convention": 6, "hfu": 1, "kernel_efficiency": "high", "global_batch": "1024", "reserve_gib": "4",
    "capacity_gib": "80", "tokens": [1], "params": [1], "gpus": "8", "gpu": 100, "mfu": [0.4], "tflops": {"x": 1},
    "price_per_gpu_hour": "2$", "nvlink_gbps": "450", "net_gbps": "50", "collective": 1, "nranks": "8", "scope": 1,
    "metric": 1, "since": 20261120, "job": 1, "reference": 1, "max_regression": [0.03],
}


def _verbs():
    import inspect

    return [(n, getattr(ta, n)) for n in ta.__all__ if n != "__version__" and not inspect.isclass(getattr(ta, n))]


def _parameter_cases():
    import inspect

    cases = []
    for verb, fn in _verbs():
        for p in inspect.signature(fn).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                cases.append((verb, p.name))
    return cases


PARAMETERS = _parameter_cases()


@pytest.mark.parametrize("verb,param", PARAMETERS, ids=[f"{v}-{p}" for v, p in PARAMETERS])
@pytest.mark.parametrize("kind", ["typo", "object"])
def test_a_wrong_typed_argument_is_an_invalid_argument_naming_it(verb, param, kind):
    args = dict(REQUIRED.get(verb, {"source": DLRM}))
    args[param] = WRONG[param] if kind == "typo" else object()
    with pytest.raises(InvalidArgument) as err:
        getattr(ta, verb)(**args)
    assert str(err.value).startswith(f"{param}: expected "), str(err.value)
    assert err.value.exit_code == 2


def test_every_verb_is_in_the_tables():
    """Every verb has its cases (at least a source or its required arguments), and every word of
    the vocabulary is some verb's argument: the table above covers the whole API."""
    from traceanalyzer.api._arguments import VOCABULARY

    assert len(_verbs()) == 35 and len(PARAMETERS) > 150
    assert {p for _, p in PARAMETERS} == set(VOCABULARY) == set(WRONG)


def test_an_unknown_or_missing_argument_names_the_verb():
    with pytest.raises(InvalidArgument, match=r"^select: got an unexpected keyword argument 'rank'$"):
        ta.select(DLRM, rank=[1])
    with pytest.raises(InvalidArgument, match=r"^compare: missing a required argument: 'b'$"):
        ta.compare(DLRM)
    with pytest.raises(InvalidArgument, match=r"^kernels: too many positional arguments$"):
        ta.kernels(DLRM, "name")


def test_the_right_types_pass_the_checks(analyses):
    """What the vocabulary takes: a single int or several for ranks and steps, a RunConfig for a
    configuration, a generator of paths."""
    from traceanalyzer.model import load_config

    a = analyses["dlrm"]
    assert ta.select(a, ranks=1, steps=10).steps.select("rank", "step").rows() == [(1, 10)]
    assert ta.kernels(a, ranks=1).equals(ta.kernels(a, ranks=[1]))
    two = a.steps["rank"].head(2)  # a polars Series, or a numpy array
    assert ta.select(a, ranks=two).steps["rank"].to_list() == [0, 1] == ta.select(a, ranks=two.to_numpy()).steps["rank"].to_list()
    with pytest.raises(InvalidArgument, match=r"^ranks: expected an integer or a list of integers, got list \['1'\]$"):
        ta.select(a, ranks=["1"])
    cfg = load_config(CONFIG)
    assert ta.comm_bytes(analyses["demo"], cfg).equals(ta.comm_bytes(analyses["demo"], CONFIG))
    assert ta.load(p for p in [DLRM]).ranks == list(range(8))


# --- old names: still taken, with a warning naming the version ---------------------------------

def test_old_names_still_work_with_a_deprecation_warning(analyses, store):
    from traceanalyzer.api._deprecation import RENAMED_IN

    a, demo = analyses["dlrm"], analyses["demo"]
    pairs = [
        (lambda: ta.kernels(a, rank=1, step=10), lambda: ta.kernels(a, ranks=1, steps=10), "'rank' was renamed 'ranks'"),
        (lambda: ta.ops(a, rank=[1, 2]), lambda: ta.ops(a, ranks=[1, 2]), "'rank' was renamed 'ranks'"),
        (lambda: ta.annotations(demo, source="host", per="name"), lambda: ta.annotations(demo, side="host", per="name"),
         "'source' was renamed 'side'"),
        (lambda: ta.annotations(trace=demo, source="gpu"), lambda: ta.annotations(source=demo, side="gpu"),
         "'trace' was renamed 'source'"),
        (lambda: ta.gate(store, baseline="last-good"), lambda: ta.gate(store, reference="last-good"),
         "'baseline' was renamed 'reference'"),
        (lambda: ta.report(a, ranks="summary").rank_summary, lambda: ta.report(a, show_ranks="summary").rank_summary,
         "'ranks' was renamed 'show_ranks'"),
    ]
    for old, new, said in pairs:
        with pytest.warns(DeprecationWarning, match=f"{said} in traceanalyzer {RENAMED_IN}"):
            before = old()
        after = new()
        assert before.equals(after) if isinstance(after, pl.DataFrame) else before == after


def test_critical_path_takes_its_old_analysis_argument(analyses):
    """``critical_path(trace, analysis=a)`` used ``a`` (the trace was ignored): it still does."""
    a = ta.select(analyses["dlrm"], ranks=[3])
    with pytest.warns(DeprecationWarning, match="'analysis' was renamed 'source'"):
        old = ta.critical_path(DLRM, analysis=a)
    assert old.summary.equals(ta.critical_path(a).summary)
    assert old.summary["ranks"].to_list() == [1]  # rank 3 alone: the analysis, not the 8-rank trace


# --- a field of the wrong JSON type, with each decoder -----------------------------------------

@pytest.mark.parametrize("decoder", ["python", "native"])
@pytest.mark.parametrize("value,kind", [({"a": {"b": {"c": [1]}}}, "an object"), ([1, [2]], "an array")])
def test_a_kernel_name_of_another_json_type_is_named_by_both_decoders(decoder, value, kind, tmp_path, monkeypatch):
    import gzip
    import json

    from conftest import DEMO
    from traceanalyzer.parsers import decoder as decoders

    if decoder == "native" and decoders._compiled() is None:
        pytest.skip("the compiled decoder is not built")
    monkeypatch.setenv("TRACEANALYZER_DECODER", decoder)
    doc = json.loads(gzip.decompress(DEMO.read_bytes()))
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][i]["name"] = value
    bad = tmp_path / "objname.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InvalidTrace) as err:
        ta.load(bad, workers=1)
    assert str(err.value) == f"{bad}: malformed events: event {i} ('ph': 'X') has {kind} for 'name' (a string is expected)"
