"""The real H200 training traces against their ground truth, measured outside the trace.

``../shared/traces/h200/<variant>/truth.json`` (written by the capture script beside the traces):
FLOPs per step by ATen op from ``torch.utils.flop_counter.FlopCounterMode``, the profiled steps'
wall times from the host, and ``torch.cuda.max_memory_allocated()``. Each test reads its expected
values from there, none from our code.
"""

from __future__ import annotations

import gzip
import json

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.api import memory

from conftest import TRACES, shared_or_skip

H200 = TRACES / "h200"
VARIANTS = ["base", "recompute", "stalls", "small", "compiled", "b4"]
_cache: dict[str, object] = {}


def _case(variant):
    if variant not in _cache:
        path = H200 / variant / "rank0.pt.trace.json.gz"
        _cache[variant] = (path, json.loads((H200 / variant / "truth.json").read_text()), ta.analyze(path))
    return _cache[variant]


def _params():
    return shared_or_skip(VARIANTS if H200.exists() else [], "the H200 traces", H200)


@pytest.mark.parametrize("variant", _params())
def test_flops_per_step_by_op_equal_the_flop_counter(variant):
    """Our per-op FLOPs from the recorded shapes (GEMM 2MKN; attention forward 2·B·H·L²·(D+Dv),
    backward 2.5×) summed over the trace's steps, per step, against FlopCounterMode's count."""
    path, truth, a = _case(variant)
    n = a.steps.height
    ops = ta.ops(a).filter(pl.col("flops").is_not_null()).group_by("name").agg(pl.col("flops").sum())
    # FLOPs go to the op that launched the kernels: cuDNN attention's are launched by
    # _cudnn_attention_forward/_backward, one level below the SDPA op FlopCounterMode names
    launcher = {"aten._cudnn_attention_forward": "aten._scaled_dot_product_cudnn_attention",
                "aten._cudnn_attention_backward": "aten._scaled_dot_product_cudnn_attention_backward"}
    mine = {launcher.get(k, k): flops for k, flops in ((name.replace("::", "."), f) for name, f in ops.rows())}
    want = dict(truth["flops_by_op"])
    assert set(want) <= set(mine) and len(want) == 4
    if variant == "recompute":
        # The raw JSON records the MLP's second GEMM ([b·s, 4h] x [4h, h]) of every layer twice
        # per step (2 × 24 calls), but a non-reentrant checkpoint's early stop records the
        # recomputed one without running it: it launched no kernel and counts nothing, which is
        # what FlopCounterMode measured
        doc = orjson.loads(gzip.open(path).read())
        fc2 = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == "aten::addmm"
               and e.get("args", {}).get("Input Dims", [None, None])[1] == [16384, 8192]]
        assert len(fc2) == 2 * 24 * n
    for op, flops in want.items():
        assert mine[op] == flops * n, op


@pytest.mark.parametrize("variant", _params())
def test_step_times_equal_the_profiled_host_steps(variant):
    """Each step but the last (whose GPU window ends at its last GPU activity, not at the next
    step) against the host's wall time of the same profiled step, within 0.5 % (the host times
    each step around ``optimizer.step()``; the GPU window runs from first to first activity)."""
    _, truth, a = _case(variant)
    durs = a.steps.sort("start_ns")["duration_ns"].to_list()
    host = truth["step_s_profiled"][-len(durs):]
    assert len(durs) == (2 if variant == "b4" else 3)
    for mine, theirs in zip(durs[:-1], host[:-1], strict=True):
        assert mine / 1e9 == pytest.approx(theirs, rel=0.005)


@pytest.mark.parametrize("variant", _params())
def test_peak_memory_equals_max_memory_allocated(variant):
    """The allocator's peak in the trace's memory events against ``max_memory_allocated()``
    after the run. With recompute the traced peak is lower (20.2 GB against 28.9 GB): the run's
    peak is not among the traced steps' memory events (the trace holds the last three steps of
    the run), so the traced one can only be lower."""
    path, truth, _ = _case(variant)
    peak = memory(path).measured.row(0, named=True)["peak_allocated"]
    if variant == "recompute":
        assert 0 < peak < truth["peak_mem_bytes"]
    else:
        assert peak == truth["peak_mem_bytes"]
