"""The Python API keeps its promises, on the bundled 8-rank DLRM job (V100s, one ProfilerStep#10
per rank):

* a verb that needs an optional table (launches, annotations, the kernel rows) answers with the
  options the analysis was made with (``step_range=None`` stays step 0), and never changes the
  analysis it is given;
* ``select`` cuts every table, the optional ones too;
* every verb takes what its docs say (a path, a Trace or an Analysis), and the same mistake is
  the same :class:`InvalidArgument`, naming the Python argument (never a bare TypeError /
  ValueError, never a command-line flag);
* every command of the command line has its verb, and docs/api.md names no internal module.

Independent values: the kernels per rank are the kernel events of each rank file
(``ta.scan``'s docstring: 245, 310, 246, 315, 251, 245, 246, 246), which with the whole trace as
one step are the kernels of step 0.
"""

from __future__ import annotations

import re

import polars as pl
import pytest

import traceanalyzer as ta
from tests.conftest import DEMO, DLRM, ROOT
from traceanalyzer.errors import InvalidArgument, TraceAnalyzerError

KERNELS_PER_RANK = [245, 310, 246, 315, 251, 245, 246, 246]


@pytest.fixture(scope="module")
def whole():
    """The job analysed with the whole trace of each rank as one step."""
    return ta.analyze(DLRM, step_range=None)


@pytest.fixture(scope="module")
def stepped():
    return ta.analyze(DLRM)


def test_the_analysis_records_its_options(whole, stepped):
    assert whole.options.step_name is None and stepped.options.step_name == "ProfilerStep"
    assert {"events", "gpu"} <= whole.options.tables  # the API keeps the events: tables come from them


def test_launches_of_an_analysis_use_its_own_options(whole):
    """The launches of a whole-trace analysis are of its step 0, not of ProfilerStep#10."""
    assert whole.steps["step"].unique().to_list() == [0]
    per_step = ta.launches(whole)
    assert per_step.select("rank", "step").rows() == [(r, 0) for r in range(8)]
    assert per_step["kernels"].to_list() == KERNELS_PER_RANK
    # the same numbers as a path analysed with the same option
    assert per_step.equals(ta.launches(DLRM, step_range=None))
    kernels = ta.launches(whole, per="kernel")
    assert kernels["step"].unique().to_list() == [0]
    counts = kernels.filter(pl.col("kind") == "kernel").group_by("rank").len().sort("rank")["len"].to_list()
    assert counts == per_step["launched"].to_list() or sum(counts) <= sum(per_step["launched"].to_list())


def test_an_analysis_without_events_is_analysed_again_with_its_options():
    """An analysis whose workers kept no events (as the command line's) gets an optional table
    by analysing its files again with the options recorded in it: still step 0."""
    from traceanalyzer.engine import Options, analyse

    compact = analyse([DLRM], Options(step_name=None), workers=2, quiet=True)  # rank workers: no events kept
    assert compact.trace.events.height == 0 and compact.options.step_name is None
    per_step = ta.launches(compact)
    assert per_step["step"].unique().to_list() == [0]
    assert per_step["kernels"].to_list() == KERNELS_PER_RANK
    assert compact.extras == {}  # never changed


def test_verbs_never_change_the_analysis_they_are_given(stepped):
    assert stepped.kernel_stats is None and stepped.op_stats is None and stepped.extras == {}
    k = ta.kernels(stepped)
    ta.ops(stepped)
    ta.launches(stepped)
    ta.queue_length(stepped)
    ta.annotations(stepped)
    ta.report(stepped)
    assert stepped.kernel_stats is None and stepped.op_stats is None and stepped.extras == {}
    # the kernel table of the analysis is the kernel table of its files
    assert k.equals(ta.kernels(DLRM))


def test_select_cuts_every_table(stepped):
    from traceanalyzer.engine import with_tables

    full = with_tables(stepped, "launches", "queue", "annotations", "kernel_stats")
    one = ta.select(full, ranks=[1])
    for name in ("launches", "queue", "annotations"):
        assert one.extras[name]["rank"].unique().to_list() == [1], name
        assert one.extras[name].equals(full.extras[name].filter(pl.col("rank") == 1)), name
    for frame in (one.kernel_stats, one.op_stats, one.steps, one.gpu, one.trace.events):
        assert frame["rank"].unique().to_list() == [1]
    # what the verbs answer on the cut: rank 1's rows of the whole
    assert ta.launches(one).equals(ta.launches(full).filter(pl.col("rank") == 1))
    assert ta.launches(one)["kernels"].to_list() == [KERNELS_PER_RANK[1] - _outside(stepped, 1)]
    assert one.options == full.options


def _outside(a, rank: int) -> int:
    """Kernels of ``rank`` that start outside its step window (before ProfilerStep#10)."""
    w = a.windows.filter(pl.col("rank") == rank).row(0, named=True)
    k = a.trace.events.filter((pl.col("rank") == rank) & (pl.col("kind") == "kernel"))
    return k.filter((pl.col("start_ns") < w["wstart_ns"]) | (pl.col("start_ns") >= w["wend_ns"])).height


def test_memory_and_critical_path_take_an_analysis(stepped):
    m = ta.memory(stepped)
    assert m.copies.equals(ta.memory(DLRM).copies) and m.copies.height
    cp = ta.critical_path(stepped)
    assert cp.summary.equals(ta.critical_path(DLRM).summary)
    # the verb's docstring: with host time on the path (the default), rank 3's host holds the
    # whole 13.762 ms path of step 10
    assert cp.summary.select("step", "ranks", "path_ns").row(0) == (10, 1, 13762000)
    assert ta.critical_path(ta.load(DLRM)).summary.equals(cp.summary)


def test_whatif_takes_a_configuration_file_and_a_trace():
    w = ta.whatif(ROOT / "docs" / "examples" / "issue1031-70b.toml", ["pp=4", "recompute=selective"])
    assert w.select("scenario", "pp", "recompute").rows() == [("anchor", 8, "full"), ("predicted", 4, "selective")]
    cfg = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
    t = ta.whatif(str(cfg), ["micro_batch=2"], source=DEMO)
    assert t["anchor_source"].to_list() == ["trace", "trace"]


BAD_CALLS = {
    "per": lambda a: ta.launches(a, per="rank"),
    "threshold": lambda a: ta.launches(a, threshold=2),
    "sort": lambda a: ta.kernels(a, sort="speed"),
    "name": lambda a: ta.ops(a, name="(unclosed"),
    "top": lambda a: ta.kernels(a, top=0),
    "precision": lambda a: ta.kernels(a, precision="fp64"),
    "recompute_range": lambda a: ta.analyze(DLRM, recompute_range="(unclosed"),
    "comm_kernels": lambda a: ta.analyze(DLRM, comm_kernels=["(?<=x)y"]),
    "side": lambda a: ta.annotations(a, side="disk"),
    "level": lambda a: ta.annotations(a, level=-1),
    "reserve_gib": lambda a: ta.memory(a, reserve_gib=-1),
    "step": lambda a: ta.critical_path(a, step=99),
    "rank": lambda a: ta.critical_path(a, rank=42),
    "tables": lambda a: __import__("traceanalyzer.engine", fromlist=["with_tables"]).with_tables(a, "nope"),
    "convention": lambda a: ta.whatif(ROOT / "docs" / "examples" / "issue1031-70b.toml", ["pp=4"], convention="flops"),
    "max_regression": lambda a: ta.gate(ROOT, max_regression=-1),
}


@pytest.mark.parametrize("arg", list(BAD_CALLS))
def test_the_same_mistake_is_the_same_error_naming_the_argument(arg, stepped):
    with pytest.raises(InvalidArgument) as exc:
        BAD_CALLS[arg](stepped)
    assert isinstance(exc.value, TraceAnalyzerError) and exc.value.exit_code == 2
    assert re.search(rf"\b{arg}\b", str(exc.value)), str(exc.value)
    assert "--" not in str(exc.value)  # worded for a Python caller, not as command-line flags


@pytest.mark.parametrize("verb", ["memory", "critical_path", "launches", "kernels", "annotations", "analyze"])
def test_a_source_of_another_type_is_an_invalid_argument(verb):
    with pytest.raises(InvalidArgument, match="expected a path"):
        getattr(ta, verb)(42)


def test_every_command_has_its_verb():
    """Each command of the command line is a verb of the Python API (``critical-path``:
    ``critical_path``), documented in docs/api.md."""
    from traceanalyzer.cli import app

    commands = {(c.name or c.callback.__name__).replace("-", "_") for c in app.registered_commands}
    assert len(commands) == 19
    assert commands <= set(ta.__all__), sorted(commands - set(ta.__all__))
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert all(f"## `{c}`" in text for c in commands)


def test_the_reference_names_no_internal_module():
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    # a module path (``traceanalyzer.classify.tables``, ``from traceanalyzer.model import``); a
    # schema name (``traceanalyzer.reconcile``) is not one
    internal = re.findall(r"traceanalyzer\.(?:classify|engine|reconcile|model|parsers|render|report|batch|baselines|commands)"
                          r"(?:\.\w| import)|\bengine\.analyse\b|Options\(", text)
    assert internal == []


def test_the_optional_table_registry():
    """One registry names every optional table (a command's named bundles, KEEP, are its names); the functions
    that compute the extra tables are the classifiers' own."""
    import importlib

    from traceanalyzer.engine import KEEP, TABLES, Options
    from traceanalyzer.engine.rank import EXTRAS

    assert Options(tables={"launches"}).tables == {"launches"} and Options().tables == frozenset()
    assert Options().with_tables("events", "gpu", without=("gpu",)).tables == {"events"}
    assert all(set(v) <= set(TABLES) for v in KEEP.values()) and set(EXTRAS) <= set(TABLES)
    with pytest.raises(InvalidArgument, match="tables: no optional table 'nope'"):
        Options(tables={"nope"})
    for func in EXTRAS.values():
        assert callable(func) and func.__module__.startswith("traceanalyzer.classify.")  # the engine computes, classify holds the code
    for name, target in ta._API.items():
        module, attr = target.split(":")
        assert hasattr(importlib.import_module(module), attr), name


def test_the_vocabularies_the_api_re_exports():
    """The option vocabularies ``traceanalyzer.api.commandoptions`` re-exports for the command line
    (named in strings, loaded on first use) are the defining modules' own objects; other names
    are not there, and the public verbs' module holds none of them."""
    import importlib

    from traceanalyzer import api as verbs
    from traceanalyzer.api import commandoptions as api

    assert not any(hasattr(verbs, name) for name in api._VOCABULARY)

    for name, module in api._VOCABULARY.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), name), name
    assert api.LAST_GOOD == "last-good" and "total" in api.SORT_KEYS
    with pytest.raises(AttributeError, match="no attribute 'NOPE'"):
        api.NOPE  # noqa: B018
