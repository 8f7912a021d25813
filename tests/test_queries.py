"""How the package runs polars queries: the in-memory engine on every collect, and table orders
that do not depend on the engine."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import traceanalyzer
from traceanalyzer.classify.kernelstats import sort_table
from traceanalyzer.queries import ENGINE, LARGE_EVENTS, query_engine, sized

PACKAGE = Path(traceanalyzer.__file__).parent


def test_every_collect_names_the_engine():
    # a bare .collect() runs on polars' default engine (streaming from polars 2: about twice the
    # CPU on the package's small plans); the source is the place to catch one
    bare = []
    for p in sorted(PACKAGE.rglob("*.py")):
        if p.name == "queries.py":  # says what a bare collect does
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"\.collect\(\s*\)", line) and not line.lstrip().startswith((">>>", "#")) and "gc.collect()" not in line:
                bare.append(f"{p.relative_to(PACKAGE)}:{n}")
    assert bare == []
    assert ENGINE == "in-memory"


def test_engine_is_asked_per_call_and_the_callers_setting_is_kept():
    with pl.Config(engine_affinity="streaming"):
        out = pl.LazyFrame({"a": [3, 1, 2]}).sort("a").collect(engine=ENGINE)
        assert out.get_column("a").to_list() == [1, 2, 3]
        assert pl.Config.state().get("POLARS_ENGINE_AFFINITY") == "streaming"


@pytest.mark.parametrize("sort", ["total", "name"])
def test_ties_keep_one_order(sort):
    # two rows of aten::mm with the same time and different shapes, one without shapes: by time,
    # then name, then input shapes (missing last), whatever order they arrive in
    rows = pl.DataFrame({
        "name": ["aten::mm", "aten::mm", "aten::add", "aten::mm"],
        "input_dims": ["[[2,2]]", "[[1,1]]", None, None],
        "total_ns": [5, 5, 7, 5],
    })
    want = {
        "total": [("aten::add", None), ("aten::mm", "[[1,1]]"), ("aten::mm", "[[2,2]]"), ("aten::mm", None)],
        "name": [("aten::add", None), ("aten::mm", "[[1,1]]"), ("aten::mm", "[[2,2]]"), ("aten::mm", None)],
    }[sort]
    for perm in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        got = sort_table(rows[perm], sort).select("name", "input_dims").rows()
        assert got == want


def test_the_engine_follows_the_size_of_the_rank():
    assert query_engine() == "in-memory"
    with sized(LARGE_EVENTS - 1) as small:
        assert small == query_engine() == "in-memory"
        with sized(LARGE_EVENTS) as large:
            assert large == query_engine() == "streaming"
        assert query_engine() == "in-memory"
    with pytest.raises(ZeroDivisionError):
        with sized(10 * LARGE_EVENTS):
            assert query_engine() == "streaming"
            1 / 0
    assert query_engine() == "in-memory"


def test_a_large_rank_gives_what_a_small_one_gives(monkeypatch):
    # the same per-step partition, idle split and collectives through both engines: the 8-rank
    # DLRM fixture classified with the threshold above its size, then below it
    import traceanalyzer as ta
    from traceanalyzer import queries
    from conftest import DLRM

    seen = []
    collect = pl.LazyFrame.collect

    def spy(self, *args, **kwargs):
        import sys

        if sys._getframe(1).f_globals.get("__name__", "").startswith("traceanalyzer."):  # the package's queries, not polars' own
            seen.append(kwargs.get("engine"))
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    trace = ta.load(DLRM)
    seen.clear()
    small = ta.analyze(trace)
    assert set(seen) == {"in-memory"}
    monkeypatch.setattr(queries, "LARGE_EVENTS", 1)
    seen.clear()
    large = ta.analyze(trace)
    assert "streaming" in seen
    assert large.steps.height == 8 * small.steps.height // 8 > 0
    assert large.steps.equals(small.steps)
    assert large.collectives.equals(small.collectives)
