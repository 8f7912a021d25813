#!/usr/bin/env python
"""Reference numbers from Meta's Holistic Trace Analysis (HTA) and from plain Python.

Run under the HTA venv (never the system Python; HTA pulls pandas/plotly/jupyter):

    python -m venv .venv-hta
    .venv-hta/bin/pip install holistictraceanalysis "pandas==2.2.3"   # pandas 3 crashes HTA on MI300X
    .venv-hta/bin/python scripts/hta_reference.py --out tests/data/hta_reference.json

What it writes, per job (one trace file alone, or a whole multi-rank folder) and per rank:

* ``hta``: what HTA itself reports -- ``get_temporal_breakdown()`` (idle / compute /
  non-compute / kernel time in whole us, and its percentages), ``get_comm_comp_overlap()``,
  the window HTA used (first GPU start / last GPU end of the events it kept, in HTA's
  aligned us and in the file's own ``ts`` frame), how many GPU rows it kept,
  ``get_idle_time_breakdown()`` and the wall-clock time of load + temporal breakdown.
  Where HTA crashes or refuses a trace the error string is recorded instead.
  If a second venv with the newer release (``traceinsight``, same ``hta`` package) exists,
  the same is recorded under ``hta_newer``.
* ``raw``: our own definitions computed by hand from the JSON, integer nanoseconds
  (absolute ns = baseTimeNanoseconds + round(ts*1000), end = start + round(dur*1000)),
  every GPU kernel / gpu_memcpy / gpu_memset event (legacy Kernel/Memcpy/Memset too),
  no cuda_sync, no step cut: span, busy union, compute union (non-communication kernels),
  communication union (name starts with nccl/rccl, case-insensitive), communication under
  compute, exposed communication, memcpy/memset alone, idle.
* ``ladder``: the same quantities re-computed while switching HTA's rules on one at a time
  (event set -> classification -> whole-us rounding -> last-step window cut). The last
  rung re-implements HTA 0.5.0 in plain Python and must equal ``hta`` exactly; the steps
  between rungs measure what each rule changes.

Plain Python loops on purpose: this is a reference, not product code.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the real traces beside the checkout (see the README), as the test suite finds them
TRACES = Path(os.environ.get("TRACEANALYZER_TRACES", Path(__file__).resolve().parents[1].parent / "shared" / "traces"))
TRACE_ROOTS = [TRACES / "hta", TRACES / "kineto-public"]
FOLDER_JOBS = [
    TRACES / "kineto-public" / "param-dlrm-v100-8rank",
    TRACES / "hta" / "trace_filter",
]
LARGEST = TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
NEWER_VENV_PY = Path(".venv-traceinsight/bin/python")

# ---------------------------------------------------------------------------------------
# trace loading
# ---------------------------------------------------------------------------------------


def load_json(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = json.loads(fh.read())
    if isinstance(data, list):  # bare event array
        data = {"traceEvents": data}
    return data


def hta_rank_of(path: Path) -> int:
    """HTA 0.5.0 trace_file.create_rank_to_trace_dict: first match of '"rank":\\s+(\\d+)'
    scanning the raw text line by line; 0 when absent."""
    rank_re = re.compile(r'"rank":\s+(\d+)')
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        for line in fh:
            m = rank_re.search(line)
            if m:
                return int(m.group(1))
    return 0


def us(ns: int | None) -> float | None:
    return None if ns is None else ns / 1000.0


# ---------------------------------------------------------------------------------------
# interval helpers (integer endpoints, half-open [s, e))
# ---------------------------------------------------------------------------------------


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def measure(u: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in u)


def intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Intersection of two disjoint sorted unions."""
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if s < e:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


# ---------------------------------------------------------------------------------------
# our definitions ("raw")
# ---------------------------------------------------------------------------------------

KERNEL_CATS = {"kernel", "Kernel"}
MEM_CATS = {"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}


def _exact_ns(us: float) -> int:
    """Nearest integer ns of a float µs value, computed without float rounding of the product:
    Kineto writes µs with 3 decimals, and below 2**43 µs (every base-relative trace) the float
    is within 0.25 ns of the written value, so this recovers it exactly."""
    whole = math.floor(us)
    return whole * 1000 + round((us - whole) * 1000)


def ts_ns(base: int, ts: Any) -> int:
    if isinstance(ts, int):
        return base + ts * 1000
    return base + _exact_ns(float(ts))


def dur_ns(dur: Any) -> int:
    if isinstance(dur, int):
        return dur * 1000
    return _exact_ns(float(dur))


def is_comm_name(name: str) -> bool:
    n = name.lower()
    return n.startswith("nccl") or n.startswith("rccl")


def raw_ours(data: dict) -> dict:
    """Our definitions, integer ns, all kernel/memcpy/memset events, no cut, no sync."""
    base = int(data.get("baseTimeNanoseconds") or 0)
    events = data.get("traceEvents") or []
    comp, comm, mem = [], [], []
    n_sync = sync_ns = 0
    rpc_ext: set = set()
    kernels_ext: list[tuple[Any, str, int, int]] = []
    for e in events:
        if not isinstance(e, dict):
            continue
        cat = e.get("cat")
        if cat == "cpu_op" and e.get("name") == "record_param_comms":
            ext = (e.get("args") or {}).get("External id")
            if ext is not None:
                rpc_ext.add(ext)
        if e.get("ph") != "X" or "dur" not in e or "ts" not in e:
            continue
        if cat == "cuda_sync":
            n_sync += 1
            sync_ns += dur_ns(e["dur"])
            continue
        if cat not in KERNEL_CATS and cat not in MEM_CATS:
            continue
        s = ts_ns(base, e["ts"])
        iv = (s, s + dur_ns(e["dur"]))
        if cat in MEM_CATS:
            mem.append(iv)
        elif is_comm_name(str(e.get("name", ""))):
            comm.append(iv)
        else:
            comp.append(iv)
            args = e.get("args") or {}
            ext = args.get("External id", args.get("external id"))
            kernels_ext.append((ext, str(e.get("name", "")), iv[0], iv[1]))
    all_iv = comp + comm + mem
    if not all_iv:
        return {"error": "no GPU kernel/memcpy/memset events"}
    start = min(s for s, _ in all_iv)
    end = max(e for _, e in all_iv)
    u_busy = union(all_iv)
    u_comp = union(comp)
    u_comm = union(comm)
    u_cc = union(comp + comm)
    comm_under = measure(intersect(u_comm, u_comp))
    busy = measure(u_busy)
    compute = measure(u_comp)
    comm_t = measure(u_comm)
    other = busy - measure(u_cc)
    span = end - start
    # kernels launched by record_param_comms whose name does not say NCCL/RCCL
    rpc_only = [k for k in kernels_ext if k[0] is not None and k[0] in rpc_ext]
    res_ns = {
        "span_start_ns": start,
        "span_end_ns": end,
        "span_ns": span,
        "busy_ns": busy,
        "idle_ns": span - busy,
        "compute_ns": compute,
        "comm_ns": comm_t,
        "comm_under_compute_ns": comm_under,
        "exposed_comm_ns": comm_t - comm_under,
        "other_ns": other,
        "non_compute_ns": busy - compute,
    }
    assert res_ns["compute_ns"] + res_ns["exposed_comm_ns"] + res_ns["other_ns"] + res_ns["idle_ns"] == span
    out: dict[str, Any] = dict(res_ns)
    out.update(
        {
            "base_time_ns": base,
            "n_kernels_compute": len(comp),
            "n_kernels_comm": len(comm),
            "n_memcpy_memset": len(mem),
            "n_cuda_sync_excluded": n_sync,
            "cuda_sync_sum_dur_ns": sync_ns,
            "n_compute_kernels_launched_by_record_param_comms": len(rpc_only),
            "idle_pct": round(100 * (span - busy) / span, 4) if span else None,
            "compute_pct": round(100 * compute / span, 4) if span else None,
            "comm_under_compute_pct_of_comm": round(100 * comm_under / comm_t, 4) if comm_t else None,
        }
    )
    return out


STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
STEP_CATS = {"user_annotation", "cpu_op", "Operator"}  # the CPU-side annotation, not gpu_user_annotation


def window_metrics(ivs: dict[str, list[tuple[int, int]]], lo: int, hi: int) -> dict:
    """Partition [lo, hi) by our rules; intervals clipped to the window."""
    def clip(lst):
        return union([(max(s, lo), min(e, hi)) for s, e in lst if e > lo and s < hi])

    comp, comm, mem = clip(ivs["comp"]), clip(ivs["comm"]), clip(ivs["mem"])
    busy = measure(union(comp + comm + mem))
    cc = measure(union(comp + comm))
    under = measure(intersect(comm, comp))
    c = measure(comp)
    cm = measure(comm)
    return {
        "start_ns": lo, "end_ns": hi, "span_ns": hi - lo, "idle_ns": hi - lo - busy, "compute_ns": c,
        "exposed_comm_ns": cm - under, "overlapped_comm_ns": under, "other_ns": busy - cc,
    }


def raw_steps(data: dict) -> dict | None:
    """Our steps: step N is ProfilerStep#N's host range [start, end) (the last one included),
    kept when it launched GPU work (a launch call inside it, by correlation); the partition
    classifies the GPU time inside that range, whenever the work was launched. Returns None
    without step markers."""
    base = int(data.get("baseTimeNanoseconds") or 0)
    events = [e for e in (data.get("traceEvents") or []) if isinstance(e, dict)]
    steps = []
    launch_ts: dict[Any, int] = {}
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        name, cat = str(e.get("name", "")), e.get("cat")
        m = STEP_RE.match(name)
        if m and cat in STEP_CATS:
            s = ts_ns(base, e["ts"])
            steps.append((s, s + dur_ns(e.get("dur", 0)), int(m.group(1))))
        if cat in LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                launch_ts[corr] = ts_ns(base, e["ts"])
    if not steps:
        return None
    steps.sort()
    ivs: dict[str, list[tuple[int, int]]] = {"comp": [], "comm": [], "mem": []}
    first: dict[int, int] = {}
    last_end: dict[int, int] = {}
    n_unlaunched = 0
    for e in events:
        cat = e.get("cat")
        if e.get("ph") != "X" or (cat not in KERNEL_CATS and cat not in MEM_CATS):
            continue
        s = ts_ns(base, e["ts"])
        iv = (s, s + dur_ns(e["dur"]))
        key = "mem" if cat in MEM_CATS else ("comm" if is_comm_name(str(e.get("name", ""))) else "comp")
        ivs[key].append(iv)
        lt = launch_ts.get((e.get("args") or {}).get("correlation"))
        if lt is None:
            n_unlaunched += 1
            continue
        for st, en, n in steps:
            if st <= lt < en:
                first[n] = min(first.get(n, iv[0]), iv[0])
                last_end[n] = max(last_end.get(n, iv[1]), iv[1])
                break
    nums = [n for _, _, n in steps if n in first]
    span = {n: (st, en) for st, en, n in steps}
    out_steps = []
    for i, n in enumerate(nums):
        lo, hi = span[n]
        if i + 1 < len(nums):  # overlapping ranges are cut where the next one begins
            hi = min(hi, span[nums[i + 1]][0])
        out_steps.append({"step": n, **window_metrics(ivs, lo, hi)})
    res: dict[str, Any] = {"n_gpu_events_without_cpu_launch": n_unlaunched, "steps": out_steps}
    if len(nums) >= 2:
        # the span HTA keeps when it drops the last step: first step start .. last step start
        res["all_but_last_step"] = window_metrics(ivs, first[nums[0]], first[nums[-1]])
    return res


# ---------------------------------------------------------------------------------------
# HTA 0.5.0 rules re-implemented in plain Python ("ladder")
# ---------------------------------------------------------------------------------------

HTA_COMM_RE = re.compile(r"^nccl.*Kernel")
HTA_MEM_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
HTA_NONCOMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> str:
    if HTA_COMM_RE.match(name):
        return "COMMUNICATION"
    if HTA_MEM_RE.match(name):
        return "MEMORY"
    if not HTA_NONCOMPUTE_RE.match(name):
        return "COMPUTATION"
    return "OTHER"


def our_kernel_type(cat: str, name: str) -> str:
    if cat in MEM_CATS:
        return "MEMORY"
    if cat in KERNEL_CATS:
        return "COMMUNICATION" if is_comm_name(name) else "COMPUTATION"
    return "OTHER"  # anything else HTA counts as a GPU event (cuda_sync, ...)


def _to_stream(v: Any) -> int:
    try:
        return int(v)
    except (ValueError, TypeError):
        return -1


def hta_rows(data: dict, rounding: bool) -> tuple[list[dict], bool]:
    """The rows HTA 0.5.0 keeps from one file: events with non-null dur and cat, cat != Trace.
    ts/dur in the file's us; with ``rounding`` and a float ts column, ceil(ts), floor(ts+dur)."""
    events = [e for e in (data.get("traceEvents") or []) if isinstance(e, dict)]
    # pandas builds a float64 ts column when any ts is fractional or missing
    ts_float = any(isinstance(e.get("ts"), float) or "ts" not in e or e.get("ts") is None for e in events)
    rows = []
    for idx, e in enumerate(events):
        if e.get("dur") is None or e.get("cat") is None or e.get("cat") == "Trace":
            continue
        ts, dur = e.get("ts"), e["dur"]
        if ts_float and rounding:
            end = math.floor(float(ts) + float(dur))
            ts = math.ceil(float(ts))
            dur = end - ts
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation", -1)
        rows.append(
            {
                "index": idx,
                "cat": e["cat"],
                "name": str(e.get("name", "")),
                "ts": ts,
                "dur": dur,
                "stream": _to_stream(args.get("stream", -1)),
                "correlation": corr if isinstance(corr, int) else -1,
            }
        )
    return rows, ts_float


def hta_gpu_pred(r: dict) -> bool:
    """trace_filter._filter_gpu_kernels_with_cuda_sync"""
    return (r["stream"] >= 0 and r["correlation"] >= 0) or r["name"] in ("Event Sync", "Context Sync")


def hta_window_cut(rows: list[dict], step_names: set[str]) -> tuple[list[dict], dict]:
    """Trace._filter_irrelevant_gpu_kernels for one rank (include_last_profiler_step=False)."""
    cpu = [r for r in rows if not hta_gpu_pred(r)]
    gpu = [r for r in rows if hta_gpu_pred(r)]
    step_ts = [r["ts"] for r in cpu if r["name"] in step_names]
    last_start = max(step_ts) if step_ts else None
    kept_cpu = [r for r in cpu if last_start is not None and r["ts"] < last_start]
    mult: dict[int, int] = {}
    for r in kept_cpu:
        mult[r["correlation"]] = mult.get(r["correlation"], 0) + 1
    kept_gpu = []
    for r in gpu:
        kept_gpu.extend([r] * mult.get(r["correlation"], 0))
    cpu_corr = {r["correlation"] for r in cpu}
    only_ann = [r["ts"] for r in cpu if r["name"] in step_names and r["cat"] != "gpu_user_annotation"]
    info = {
        "last_profiler_step_start_us": _num(last_start),
        "last_step_start_taken_from_gpu_user_annotation": bool(only_ann) and last_start is not None
        and max(only_ann) != last_start,
        "n_gpu_rows_dropped_by_cut": len(gpu) - len({id(r) for r in kept_gpu}),
        "n_gpu_rows_without_cpu_launch": sum(1 for r in gpu if r["correlation"] not in cpu_corr),
    }
    if info["last_step_start_taken_from_gpu_user_annotation"]:
        cpu_last = max(only_ann)
        corr_cpu_cut = {r["correlation"] for r in cpu if r["ts"] < cpu_last}
        info["n_gpu_rows_kept_if_cut_at_cpu_annotation"] = sum(1 for r in gpu if r["correlation"] in corr_cpu_cut)
        info["n_gpu_rows_kept"] = len({id(r) for r in kept_gpu})
    return kept_gpu + kept_cpu, info


def hta_merge(iv: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """utils.merge_kernel_intervals: a new group starts when ts > cummax(previous ends)."""
    groups: list[list[Any]] = []
    cummax = None
    for s, e in sorted(iv, key=lambda x: x[0]):
        if cummax is None or s > cummax:
            groups.append([s, e])
        else:
            groups[-1][0] = min(groups[-1][0], s)
            groups[-1][1] = max(groups[-1][1], e)
        cummax = e if cummax is None else max(cummax, e)
    return [(s, e) for s, e in groups]


def ladder_metrics(events: list[tuple[Any, Any, str]], min_ts: Any) -> dict:
    """events: (start, end, type). Mirrors get_temporal_breakdown / get_comm_comp_overlap."""
    if not events:
        return {"error": "no GPU events (HTA raises IndexError here)"}
    merged = hta_merge([(s, e) for s, e, _ in events])
    kernel_time = merged[-1][1] - merged[0][0]
    idle = kernel_time - sum(e - s for s, e in merged)
    comp = hta_merge([(s, e) for s, e, t in events if t == "COMPUTATION"])
    comm = hta_merge([(s, e) for s, e, t in events if t == "COMMUNICATION"])
    compute = sum(e - s for s, e in comp)
    comm_t = sum(e - s for s, e in comm)
    overlap = measure(intersect(comm, comp)) if comm and comp else 0
    kernel_time, idle, compute, comm_t, overlap = (_num(x) for x in (kernel_time, idle, compute, comm_t, overlap))
    return {
        "kernel_time": kernel_time,
        "idle_time": idle,
        "compute_time": compute,
        "non_compute_time": _num(kernel_time - compute - idle),
        "comm_time": comm_t,
        "comm_under_compute": overlap,
        "idle_time_pctg": round(100 * idle / kernel_time, 2) if kernel_time else None,
        "compute_time_pctg": round(100 * compute / kernel_time, 2) if kernel_time else None,
        "comp_comm_overlap_pctg": round(100 * overlap / comm_t, 2) if comm_t else None,
        "first_gpu_start": _num(merged[0][0] - min_ts),
        "last_gpu_end": _num(merged[-1][1] - min_ts),
        "n_gpu_rows": len(events),
    }


def ladder_for_job(files: list[Path], datas: list[dict]) -> dict[str, dict]:
    """Per file: rungs from our definitions to HTA 0.5.0's, each changing one rule.

    r0_ours           our event set (kernel+memcpy+memset), our classes, ns, no cut
    r1_hta_events     + HTA's event set (every row with an integer 'stream' arg: adds cuda_sync...)
    r2_hta_classes    + HTA's name-based classes (^nccl.*Kernel comm; Memcpy/Memset/Sync regex)
    r3_hta_rounding   + whole-us rounding (ceil start, floor end) when ts is fractional
    r4_hta_cut        + last-ProfilerStep window cut (kernels linked to CPU ops before it)
                      == HTA 0.5.0 (times in us, window aligned to the job's min ts)
    r4b_hta_cut_without_rounding  r4 with HTA_DISABLE_NS_ROUNDING (ns): isolates rounding
                      inside HTA's own window
    """
    per_file_rows = []
    step_names: set[str] = set()
    min_ts_rounded = None
    mn = None  # job-wide min ts in ns (unrounded), for the ns rungs' window
    for data in datas:
        rows_r, ts_float = hta_rows(data, rounding=True)
        rows_n, _ = hta_rows(data, rounding=False)
        per_file_rows.append((rows_r, rows_n, ts_float, int(data.get("baseTimeNanoseconds") or 0)))
        for r in rows_r:
            if "ProfilerStep" in r["name"]:
                step_names.add(r["name"])
        if rows_r:
            m = min(r["ts"] for r in rows_r)
            min_ts_rounded = m if min_ts_rounded is None else min(min_ts_rounded, m)
            m = min(ts_ns(0, r["ts"]) for r in hta_rows(data, rounding=False)[0])
            mn = m if mn is None else min(mn, m)
    cut_applies = len(step_names) >= 2
    out = {}
    for f, (rows_r, rows_n, ts_float, base) in zip(files, per_file_rows):
        def ns_iv(r):
            s = ts_ns(0, r["ts"])
            return s, s + dur_ns(r["dur"])

        ours_rows = [r for r in rows_n if r["cat"] in KERNEL_CATS or r["cat"] in MEM_CATS]
        hta_ev_rows = [r for r in rows_n if r["stream"] != -1]
        rungs = {
            "r0_ours": [(*ns_iv(r), our_kernel_type(r["cat"], r["name"])) for r in ours_rows],
            "r1_hta_events": [(*ns_iv(r), our_kernel_type(r["cat"], r["name"])) for r in hta_ev_rows],
            "r2_hta_classes": [(*ns_iv(r), hta_kernel_type(r["name"])) for r in hta_ev_rows],
            "r3_hta_rounding": [
                (r["ts"], r["ts"] + r["dur"], hta_kernel_type(r["name"])) for r in rows_r if r["stream"] != -1
            ],
        }
        res: dict[str, Any] = {"units": {"r0..r2, r4b": "ns", "r3, r4": "us (HTA's)"}}
        for k, ev in rungs.items():
            res[k] = ladder_metrics(ev, mn if k != "r3_hta_rounding" else min_ts_rounded)
        cut_info: dict[str, Any] = {"cut_applies": cut_applies, "profiler_step_names_in_job": len(step_names)}
        if cut_applies:
            kept, info = hta_window_cut(rows_r, step_names)
            cut_info.update(info)
        else:
            kept = rows_r
        if cut_applies:
            kept_n, _ = hta_window_cut(rows_n, step_names)
        else:
            kept_n = rows_n
        res["r4b_hta_cut_without_rounding"] = ladder_metrics(
            [(*ns_iv(r), hta_kernel_type(r["name"])) for r in kept_n if r["stream"] != -1], mn
        )
        res["r4_hta_cut"] = ladder_metrics(
            [(r["ts"], r["ts"] + r["dur"], hta_kernel_type(r["name"])) for r in kept if r["stream"] != -1],
            min_ts_rounded,
        )
        res["cut"] = cut_info
        res["ts_is_float"] = ts_float
        res["n_negative_dur_after_rounding"] = sum(
            1 for r in rows_r if r["stream"] != -1 and r["dur"] < 0
        ) if ts_float else 0
        res["hta_min_ts_us"] = _num(min_ts_rounded)
        out[str(f)] = res
    return out


# ---------------------------------------------------------------------------------------
# HTA itself (worker mode, runs inside an HTA venv in a fresh process per job)
# ---------------------------------------------------------------------------------------


def _num(x: Any) -> Any:
    try:
        if x is None:
            return None
        f = float(x)
        if math.isnan(f):
            return None
        return int(f) if f == int(f) and abs(f) < 2**62 else f
    except (TypeError, ValueError, OverflowError):
        return str(x)


def worker(files: list[str], repeats: int, idle_breakdown: bool = True) -> dict:
    import logging

    from hta.configs.config import logger as hta_logger

    hta_logger.setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    import hta
    from hta.trace_analysis import TraceAnalysis

    try:
        from importlib.metadata import version as _v

        dist = "holistictraceanalysis"
        try:
            ver = _v(dist)
        except Exception:
            dist, ver = "traceinsight", _v("traceinsight")
    except Exception:  # pragma: no cover
        dist, ver = "unknown", getattr(hta, "__version__", "?")
    out: dict[str, Any] = {"dist": dist, "version": ver}
    with tempfile.TemporaryDirectory() as td:
        for f in files:
            os.symlink(f, os.path.join(td, os.path.basename(f)))
        times = []
        ta = None
        try:
            for _ in range(repeats):
                t0 = time.perf_counter()
                ta = TraceAnalysis(trace_dir=td)
                t1 = time.perf_counter()
                tb = ta.get_temporal_breakdown(visualize=False)
                t2 = time.perf_counter()
                times.append({"load_s": t1 - t0, "temporal_s": t2 - t1, "total_s": t2 - t0})
        except Exception as ex:  # noqa: BLE001
            out["error"] = f"{type(ex).__name__}: {ex}"
            out["error_stage"] = "load" if ta is None else "get_temporal_breakdown"
            if ta is not None:
                out["rank_files"] = {str(k): v for k, v in ta.t.trace_files.items()}
            return out
        if repeats > 1:
            out["timing"] = times
        out["wall_s_load_plus_temporal"] = statistics.median(t["total_s"] for t in times)
        out["rank_files"] = {str(k): os.path.basename(v) for k, v in ta.t.trace_files.items()}
        out["min_ts_us"] = _num(ta.t.min_ts)
        try:
            ov = ta.get_comm_comp_overlap(visualize=False)
            ov_map = {int(r["rank"]): _num(r["comp_comm_overlap_pctg"]) for _, r in ov.iterrows()}
        except Exception as ex:  # noqa: BLE001
            ov_map = {}
            out["overlap_error"] = f"{type(ex).__name__}: {ex}"
        ranks = {}
        for _, row in tb.iterrows():
            rank = int(row["rank"])
            df = ta.t.get_trace(rank)
            g = df[df["stream"].ne(-1)]
            ends = g["ts"] + g["dur"]
            r: dict[str, Any] = {k: _num(row[k]) for k in tb.columns if k != "rank"}
            r["comp_comm_overlap_pctg"] = ov_map.get(rank)
            r["window_first_gpu_start_us"] = _num(g["ts"].min())
            r["window_last_gpu_end_us"] = _num(ends.max())
            r["window_first_gpu_start_file_us"] = _num(g["ts"].min() + ta.t.min_ts)
            r["window_last_gpu_end_file_us"] = _num(ends.max() + ta.t.min_ts)
            r["n_gpu_rows_kept"] = int(len(g))
            r["n_gpu_rows_kept_unique"] = int(g["index"].nunique())
            if not idle_breakdown:
                ranks[str(rank)] = r
                continue
            try:
                idle_df, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
                cats: dict[str, float] = {}
                per_stream = []
                for _, ir in idle_df.iterrows():
                    cats[ir["idle_category"]] = cats.get(ir["idle_category"], 0) + float(ir["idle_time"])
                    per_stream.append(
                        {"stream": int(ir["stream"]), "category": ir["idle_category"], "idle_time_us": _num(ir["idle_time"])}
                    )
                r["idle_breakdown_sum_over_streams_us"] = {k: _num(v) for k, v in cats.items()}
                r["idle_breakdown_per_stream"] = per_stream
            except Exception as ex:  # noqa: BLE001
                r["idle_breakdown_error"] = f"{type(ex).__name__}: {ex}"
            ranks[str(rank)] = r
        out["ranks"] = ranks
    return out


def run_worker(python: Path, files: list[Path], repeats: int = 1, timeout: int = 900, idle: bool = True) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tf:
        out_path = tf.name
    cmd = [str(python), os.path.abspath(__file__), "--worker", out_path, "--repeats", str(repeats)]
    cmd += [] if idle else ["--no-idle-breakdown"]
    cmd += [str(f) for f in files]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if p.returncode != 0:
            tail = (p.stderr or "").strip().splitlines()[-3:]
            return {"error": "worker failed: " + " | ".join(tail)}
        with open(out_path) as fh:
            return json.load(fh)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout}s"}
    finally:
        try:
            os.unlink(out_path)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------------


def discover_jobs() -> list[tuple[str, list[Path]]]:
    files = []
    for root in TRACE_ROOTS:
        files += sorted(p for p in root.rglob("*") if p.is_file() and (p.name.endswith(".json.gz") or p.name.endswith(".json")))
    jobs = [(str(f.relative_to(TRACES)), [f]) for f in files]
    for d in FOLDER_JOBS:
        members = sorted(p for p in d.iterdir() if p.name.endswith(".json.gz"))
        jobs.append((str(d.relative_to(TRACES)) + "/ (folder as one job)", members))
    return jobs


def compare(hta_rank: dict, lad: dict) -> dict:
    """Is HTA reproduced exactly by the plain-Python re-implementation (rung r4)?"""
    keys = [
        ("idle_time(us)", "idle_time"),
        ("compute_time(us)", "compute_time"),
        ("non_compute_time(us)", "non_compute_time"),
        ("kernel_time(us)", "kernel_time"),
        ("idle_time_pctg", "idle_time_pctg"),
        ("compute_time_pctg", "compute_time_pctg"),
        ("comp_comm_overlap_pctg", "comp_comm_overlap_pctg"),
        ("window_first_gpu_start_us", "first_gpu_start"),
        ("window_last_gpu_end_us", "last_gpu_end"),
        ("n_gpu_rows_kept", "n_gpu_rows"),
    ]
    mism = {}
    for hk, lk in keys:
        a, b = hta_rank.get(hk), lad.get(lk)
        if a is None and b is None:
            continue
        if a is None or b is None or abs(float(a) - float(b)) > 1e-9:
            mism[hk] = [a, b]
    return {"exact": not mism, "mismatches": mism}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/hta_reference.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--no-idle-breakdown", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--newer-python", default=str(NEWER_VENV_PY), help="python of a venv with traceinsight (optional)")
    ap.add_argument("--only", action="append", help="only jobs whose name contains this (repeatable)")
    ap.add_argument("--skip-benchmark", action="store_true")
    ap.add_argument("files", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = worker(a.files, a.repeats, not a.no_idle_breakdown)
        with open(a.worker, "w") as fh:
            json.dump(res, fh)
        return

    newer = Path(a.newer_python) if a.newer_python and Path(a.newer_python).exists() else None
    result: dict[str, Any] = {
        "generated_by": "scripts/hta_reference.py",
        "python": sys.executable,
        "definitions": {
            "raw": "ours: integer ns; all kernel/gpu_memcpy/gpu_memset (legacy Kernel/Memcpy/Memset); no cuda_sync; "
            "no step cut; comm = kernel name starting nccl/rccl (case-insensitive); compute = other kernels; "
            "other = memcpy/memset not under any kernel; idle = span - busy",
            "ladder": ladder_for_job.__doc__,
            "hta": "holistictraceanalysis TraceAnalysis(trace_dir=<dir holding only the job's files>), "
            "include_last_profiler_step=False (default); times in whole us as HTA reports them",
        },
        "jobs": {},
    }
    jobs = [j for j in discover_jobs() if not a.only or any(o in j[0] for o in a.only)]
    for name, files in jobs:
        print(f"[job] {name} ({len(files)} file(s))", file=sys.stderr, flush=True)
        datas = [load_json(f) for f in files]
        job: dict[str, Any] = {"files": [str(f) for f in files]}
        job["hta"] = run_worker(Path(sys.executable), files)
        if newer:
            job["hta_newer"] = run_worker(newer, files, idle=False)
        lad = ladder_for_job(files, datas)
        per_rank: dict[str, Any] = {}
        for f, data in zip(files, datas):
            rank = hta_rank_of(f)
            entry: dict[str, Any] = {"file": f.name, "hta_rank_by_regex": rank,
                                     "distributedInfo_rank": (data.get("distributedInfo") or {}).get("rank")}
            if len(files) > 1:
                entry["raw"] = "same as the single-file job for this file"
            else:
                entry["raw"] = raw_ours(data)
                entry["raw_steps"] = raw_steps(data)
            entry["ladder"] = lad[str(f)]
            hr = (job["hta"].get("ranks") or {}).get(str(rank))
            if hr is not None and (job["hta"].get("rank_files") or {}).get(str(rank)) == f.name:
                entry["hta_reproduced_by_r4"] = compare(hr, lad[str(f)]["r4_hta_cut"])
            per_rank[f.name] = entry
        job["per_file"] = per_rank
        result["jobs"][name] = job

    # timing on the largest trace: median of 3 fresh TraceAnalysis loads + temporal breakdown
    if not a.skip_benchmark:
        print("[timing] df_index_resolver x3", file=sys.stderr, flush=True)
        t = run_worker(Path(sys.executable), [LARGEST], repeats=3)
        with gzip.open(LARGEST, "rb") as fh:
            raw_size = len(fh.read())
        result["benchmark_largest"] = {
            "what": "TraceAnalysis(trace_dir=<dir with only this file>) + get_temporal_breakdown(visualize=False), "
            "3 runs in one fresh process (imports excluded), median",
            "file": str(LARGEST),
            "bytes_gz": LARGEST.stat().st_size,
            "bytes_json": raw_size,
            "hta_version": t.get("version"),
            "runs": t.get("timing"),
            "median_load_plus_temporal_s": t.get("wall_s_load_plus_temporal"),
            "error": t.get("error"),
            "cpu_count": os.cpu_count(),
        }
    first = next(iter(result["jobs"].values()))
    result["hta_version"] = first["hta"].get("version")
    if newer:
        result["hta_newer_version"] = first.get("hta_newer", {}).get("version")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(result, fh, indent=1, sort_keys=False)
        fh.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
