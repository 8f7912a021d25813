"""Property-based tests of the interval algebra (hypothesis), against naive references.

* ``classify.partition.partition()`` on random interval sets with random classes and random
  non-overlapping step windows, several ranks: every bucket is >= 0, the buckets sum exactly to
  the window duration, overlapped comm <= compute + recompute, and every number equals the plain
  Python reference in ``tests/reference.py`` (written from the definition, shares no code).
* ``intervals.contained_in`` on properly nested random containers against an O(n^2) check.

Example counts are moderate (CI has 2 cores); the interval coordinates are small integers so
that boundaries coincide often (the hard cases: shared edges, zero-length events, duplicates).
"""

from __future__ import annotations

import math

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference
from traceanalyzer.classify.intervals import contained_in
from traceanalyzer.classify.partition import BUCKETS, partition

CLASSES = ["compute", "recompute", "comm", "other"]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

interval = st.tuples(st.integers(0, 60), st.integers(0, 25), st.sampled_from(CLASSES)).map(
    lambda t: (t[0], t[0] + t[1], t[2])
)


@st.composite
def windows_for(draw, lo=0, hi=90):
    """Sorted, non-overlapping windows (gaps allowed, shared edges allowed, zero length allowed)."""
    cuts = sorted(draw(st.lists(st.integers(lo, hi), min_size=2, max_size=8)))
    out, step = [], 0
    for a, b in zip(cuts[::2], cuts[1::2]):
        out.append((step, a, b))
        step += draw(st.integers(1, 3))
    return out


@st.composite
def rank_sets(draw):
    ranks = {}
    for r in range(draw(st.integers(1, 3))):
        ranks[r] = (draw(st.lists(interval, max_size=25)), draw(windows_for()))
    return ranks


def _frames(ranks):
    iv = [(r, s, e, c) for r, (ivs, _) in ranks.items() for s, e, c in ivs]
    wins = [(r, step, a, b) for r, (_, ws) in ranks.items() for step, a, b in ws]
    labelled = pl.DataFrame(iv, schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "cls": pl.String}, orient="row")
    windows = pl.DataFrame(wins, schema={"rank": pl.Int32, "step": pl.Int64, "wstart_ns": pl.Int64, "wend_ns": pl.Int64}, orient="row")
    return labelled, windows


@SETTINGS
@given(rank_sets())
def test_partition_is_exact_and_equals_the_reference(ranks):
    labelled, windows = _frames(ranks)
    got = partition(labelled, windows, "hypothesis")
    assert got.height == windows.height
    rows = {(r["rank"], r["step"]): r for r in got.iter_rows(named=True)}
    for rank, (ivs, wins) in ranks.items():
        for step, a, b in wins:
            row = rows[(rank, step)]
            assert row["duration_ns"] == b - a
            assert all(row[f"{k}_ns"] >= 0 for k in [*BUCKETS, "overlapped_comm"])
            assert sum(row[f"{k}_ns"] for k in BUCKETS) == b - a
            assert row["overlapped_comm_ns"] <= row["compute_ns"] + row["recompute_ns"]
            want = reference.partition(ivs, a, b)
            assert {k: row[f"{k}_ns"] for k in want} == want, (rank, step, a, b)
            # *_us = ns / 1000 up to one ulp (polars divides by a constant as a multiply)
            assert math.isclose(row["duration_us"], (b - a) / 1000, rel_tol=4e-16, abs_tol=0)


@SETTINGS
@given(st.lists(interval, max_size=30), st.integers(1, 50), st.integers(0, 40))
def test_partition_does_not_depend_on_row_order_or_duplicates(ivs, length, start):
    ranks = {0: (ivs, [(0, start, start + length)])}
    labelled, windows = _frames(ranks)
    a = partition(labelled, windows)
    b = partition(pl.concat([labelled, labelled]).reverse(), windows)
    assert a.equals(b)


@st.composite
def laminar(draw, lo=0, hi=80, depth=0):
    """A properly nested family of intervals inside [lo, hi] (children may share edges)."""
    out = []
    if depth > 3 or hi - lo < 1:
        return out
    cuts = sorted(draw(st.lists(st.integers(lo, hi), max_size=6)))
    for a, b in zip(cuts[::2], cuts[1::2]):
        out.append((a, b))
        out += draw(laminar(a, b, depth + 1))
    return out


@SETTINGS
@given(
    st.dictionaries(st.integers(0, 2), laminar(), max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 80), st.integers(0, 30)), max_size=30),
)
def test_contained_in_equals_the_quadratic_check(containers, members):
    members = [(k, s, s + d) for k, s, d in members]
    c = pl.DataFrame(
        [(k, a, b) for k, ivs in containers.items() for a, b in ivs],
        schema={"tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )
    m = pl.DataFrame(members, schema={"tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    got = contained_in(m.lazy(), c.lazy(), ["tid"], "inside").collect()
    assert got.select("tid", "start_ns", "end_ns").rows() == members  # order and rows kept
    want = [
        any(ck == k and a <= s and b >= e for ck, ivs in containers.items() for a, b in ivs)
        for k, s, e in members
    ]
    assert got.get_column("inside").to_list() == want
