"""Invariant checks inside the pipeline: a forced violation is exit 6 naming the input, never a
printed result; on real traces the checks stay silent."""

from __future__ import annotations

import gzip
import importlib

import orjson
import polars as pl
import pytest

import traceanalyzer.classify as classify
from traceanalyzer.classify import invariants
from traceanalyzer.cli import main
from traceanalyzer.errors import InvariantViolation
from traceanalyzer.parsers import clean

from conftest import DEMO, DLRM

# the submodule (classify/__init__ re-exports a function of the same name)
partition_mod = importlib.import_module("traceanalyzer.classify.partition")


def _run(capsys, *args):
    capsys.readouterr()
    rc = main(["breakdown", *map(str, args), "-f", "json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _assert_exit6(rc, out, err, named, what):
    assert rc == 6, err
    assert out == ""  # nothing printed as a result
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("traceanalyzer: error: ") and str(named) in lines[0]
    assert "internal consistency check failed" in lines[0] or "invariant violated" in lines[0]
    assert what in lines[0]


def test_overlapping_step_windows_are_exit_6(monkeypatch, capsys):
    from traceanalyzer.classify import pipeline as rank_worker  # where each rank's windows are made

    real = rank_worker.gpu_windows

    def overlapping(events, name, *launched):
        win, warns = real(events, name, *launched)
        # stretch every window by 1 ms into the next one
        return win.with_columns(pl.col("wend_ns") + 1_000_000), warns

    monkeypatch.setattr(rank_worker, "gpu_windows", overlapping)
    _assert_exit6(*_run(capsys, DEMO), DEMO, "overlaps step")


def test_a_partition_that_does_not_sum_is_exit_6(monkeypatch, capsys):
    real = partition_mod.segment_frame

    def lossy(labelled, windows):  # lose every idle segment: the buckets no longer sum
        return real(labelled, windows).filter(pl.col("bucket") != "idle")

    monkeypatch.setattr(partition_mod, "segment_frame", lossy)
    _assert_exit6(*_run(capsys, DEMO), DEMO, "partition invariant violated")


def test_misaligned_ranks_are_exit_6_when_the_loader_lets_them_through(monkeypatch, capsys, tmp_path):
    # two DLRM ranks recorded 2 h apart: the loader refuses them (exit 4, different runs) ...
    files = sorted(DLRM.glob("*.json.gz"))[:2]
    for i, f in enumerate(files):
        doc = orjson.loads(gzip.decompress(f.read_bytes()))
        if i == 1:
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += 7_200_000_000
        (tmp_path / f.name.replace(".gz", "")).write_bytes(orjson.dumps(doc))
    rc, out, err = _run(capsys, tmp_path)
    assert rc == 4 and "h apart" in err and files[0].name.replace(".gz", "") in err and files[1].name.replace(".gz", "") in err
    # ... and if that check were broken, the pipeline's own invariant stops them (exit 6)
    monkeypatch.setattr(clean, "check_job", lambda events, meta: [])
    _assert_exit6(*_run(capsys, tmp_path), files[0].name.replace(".gz", ""), "ranks not on one time base: rank 1 is 2.0 h after rank 0")


def test_event_span_invariant(capsys):
    ev = pl.DataFrame({"rank": [0, 0, 0], "start_ns": [0, 10, 10 + clean.MAX_GAP_NS + 1], "end_ns": [5, 20, 10 + clean.MAX_GAP_NS + 2]})
    with pytest.raises(InvariantViolation, match="events outside the trace span on rank 0"):
        invariants.check_event_span(ev, "x.json")
    invariants.check_event_span(ev.head(2), "x.json")  # within the span: silent
    bad_end = pl.DataFrame({"rank": [1], "start_ns": [10], "end_ns": [5]})
    with pytest.raises(InvariantViolation, match="1 events ending before they start"):
        invariants.check_event_span(bad_end, "x.json")


def test_windows_invariant_cases():
    ev = pl.DataFrame({"rank": [0, 0], "start_ns": [0, 90], "end_ns": [10, 100]})

    def win(rows):
        return pl.DataFrame(rows, schema={"rank": pl.Int32, "step": pl.Int64, "wstart_ns": pl.Int64, "wend_ns": pl.Int64}, orient="row")

    invariants.check_windows(win([(0, 1, 0, 50), (0, 2, 50, 100)]), ev, "x")  # tiling: fine
    with pytest.raises(InvariantViolation, match="ends before it starts"):
        invariants.check_windows(win([(0, 1, 40, 30)]), ev, "x")
    with pytest.raises(InvariantViolation, match="overlaps step 1"):
        invariants.check_windows(win([(0, 1, 0, 60), (0, 2, 50, 100)]), ev, "x")
    with pytest.raises(InvariantViolation, match="outside the rank's events"):
        invariants.check_windows(win([(0, 1, 0, 101)]), ev, "x")


def test_unique_rows_equals_a_full_unique_in_order():
    import random

    from traceanalyzer.parsers.clean import _unique_rows

    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(1, 80)
        df = pl.DataFrame({
            "a": [rng.choice([1, 2, None]) for _ in range(n)],
            "s": [rng.choice(["x", "y", None, "a long name beyond the inline view size"]) for _ in range(n)],
            "b": [rng.randint(0, 2) for _ in range(n)],
        })
        want = [r for i, r in enumerate(df.rows()) if r not in df.rows()[:i]]
        assert _unique_rows(df).rows() == want
        assert _unique_rows(df, "b").rows() == want  # a key column: rows sharing its value compared in full
        assert _unique_rows(df, "a").rows() == want  # a key with nulls: every row hashed


def test_early_gpu_events_by_lookup_equal_the_join():
    import random

    from traceanalyzer.parsers.clean import GPU_WORK_KINDS, MAX_EARLY_NS, _early_by_join, _early_by_lookup
    from traceanalyzer.schema import KIND

    rng = random.Random(11)
    for trial in range(60):
        n = rng.randint(0, 60)
        df = pl.DataFrame(
            {
                "kind": [rng.choice(["runtime", "kernel", "memcpy", "cpu_op"]) for _ in range(n)],
                "correlation": [rng.choice([None, *range(12 if trial % 2 else 200)]) for _ in range(n)],
                "start_ns": [rng.randint(0, 4) * MAX_EARLY_NS for _ in range(n)],
            },
            schema={"kind": KIND, "correlation": pl.Int64, "start_ns": pl.Int64},
        )
        gpu = pl.col("kind").is_in(GPU_WORK_KINDS) & pl.col("correlation").is_not_null()
        got = _early_by_lookup(df, gpu)
        want = sorted(_early_by_join(df, gpu).to_list())
        runtime = df.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()).get_column("correlation")
        if runtime.n_unique() < runtime.len():
            assert got is None  # an id with several launches: the join decides
        else:
            assert sorted(got.to_list()) == want
