"""MTIA (Meta's accelerator) traces: device work in ``mtia_ccp_events``, runtime calls in
``mtia_runtime``. Fixture: HTA's ``tests/data/mtia_inference_trace/mtia_inference_rank_0.json.gz``
cut to its first 200 ms (see fixtures/README.md).

The parser's category table (traceanalyzer/parsers/categories.py) maps ``mtia_ccp_events`` to
device work and ``mtia_runtime`` to runtime calls. HTA's temporal
breakdown counts every row with a ``stream`` arg as GPU busy time (all ``mtia_ccp_events`` rows
carry one), merged into a union over the span from the first start to the last end; the
expected numbers below are that definition, computed by hand from the raw JSON in integer ns.
"""

from __future__ import annotations

import gzip

import orjson
import polars as pl
import pytest

import traceanalyzer as ta

from conftest import FIXTURES

MTIA = FIXTURES / "kineto" / "mtia_inference_cut.json.gz"


def _hand():
    doc = orjson.loads(gzip.open(MTIA).read())
    iv = sorted(
        (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events" and "stream" in e.get("args", {})
    )
    busy, end = 0, None
    for s, e in iv:
        if end is None or s >= end:
            busy, end = busy + e - s, e
        elif e > end:
            busy, end = busy + e - end, e
    return busy, max(e for _, e in iv) - iv[0][0], len(iv)


def test_mtia_busy_time_agrees_with_hta_definition():
    busy, span, n = _hand()
    assert (busy, span, n) == (196_975_314, 199_961_665, 608)
    a = ta.analyze(ta.load(MTIA))
    assert a.trace.meta["device_name"].to_list() == ["ARTEMIS"]
    s = a.steps.row(0, named=True)
    assert s["duration_ns"] == span
    assert s["duration_ns"] - s["idle_ns"] == busy
    assert a.outside_steps["outside_ns"].to_list() == [0]


def _union_ns(iv):
    busy, end = 0, None
    for s, e in sorted(iv):
        if end is None or s >= end:
            busy, end = busy + e - s, e
        elif e > end:
            busy, end = busy + e - end, e
    return busy


def test_dma_requests_are_copies_as_hta_classifies_them():
    # HTA (hta/common/types.py, MemoryKernelGroupingPattern "(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)";
    # hta/utils/utils.py get_kernel_type): a device row whose name starts with "dma" is a MEMORY
    # kernel, not COMPUTATION. Ours: a copy, bucket "other" like memcpy; compute is the union of
    # the other device rows, "other" the DMA time no compute overlaps (by hand, integer ns)
    doc = orjson.loads(gzip.open(MTIA).read())
    rows = [
        (e["name"], round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events" and "stream" in e.get("args", {})
    ]
    dma = [(s, e) for n, s, e in rows if n.startswith("dma")]
    rest = [(s, e) for n, s, e in rows if not n.startswith("dma")]
    assert {n for n, _, _ in rows if n.startswith("dma")} == {"dma_request"} and len(dma) == 410
    compute = _union_ns(rest)
    other = _union_ns(dma + rest) - compute
    assert (compute, other) == (195_202_915, 1_772_399)
    a = ta.analyze(ta.load(MTIA))
    s = a.steps.row(0, named=True)
    assert (s["compute_ns"], s["other_ns"]) == (compute, other)
    k = a.trace.events.filter(pl.col("name") == "dma_request")
    assert k.height == 410 and set(k["kind"].to_list()) == {"memcpy"}
