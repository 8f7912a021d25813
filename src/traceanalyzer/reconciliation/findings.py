"""Findings: the largest losses of a job, each with its cause, a remedy and the predicted gain.

:func:`findings` reads the exact partition of an :class:`~traceanalyzer.classify.Analysis`
(buckets, idle by cause, host-bound idle by what the host did, exposed communication by
dimension) and returns at most :data:`MAX_FINDINGS` losses, largest first. Each one is measured
in the trace (no finding without time in the partition: at least :data:`MIN_SHARE` of the mean
step); its ``predicted_gain_ms`` comes from the what-if model (:func:`traceanalyzer.model.whatif`,
the same code as ``traceanalyzer whatif``) when a run configuration is given and the model can
price the change, else it is null and ``gain_note`` says why. Host-bound findings (host dispatch,
the data loader, a host stall, a sync wait) are priced by the step replay instead
(:mod:`traceanalyzer.classify.profiler_cost`: the step without the profiler replayed with that
host time taken out), and read on the step without the profiler: the host-bound idle that sits
in recorded ops shrinks by what the profiler added (``ms_per_step_in_trace`` keeps the measured
value), and a finding of its own (``profiler``) says how much of the step the profiler is.

The causes and remedies fit the run (:mod:`.advice`): exposed communication that is mostly wait
names the late rank instead of "overlap"; no remedy the run already applies (CUDA graphs,
``torch.compile``); the sync calls found, by name; recompute advice by model kind; no host cause
on a capture without host events.

Every finding is a dict: ``loss`` (key), ``label``, ``ms_per_step`` (mean over the rank-steps),
``share_of_step`` (0-1, of the mean step), ``cause``, ``remedy``, ``predicted_gain_ms``,
``change`` (the what-if ``--set`` that priced it, or null) and ``gain_note``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.schema import COSTLY_PROFILER_OPTIONS as COSTLY

if TYPE_CHECKING:
    from traceanalyzer.model.config import RunConfig

MAX_FINDINGS = 5
#: a loss smaller than this share of the mean step is not a finding
MIN_SHARE = 0.01

_NO_CONFIG = "no run configuration given (-c): the what-if model needs the model and layout to price it"
_HOST = "the what-if model does not price host time; removing the stall would save at most this idle time"

_COMM_REMEDY = {
    "dp": "overlap the gradient reduce with backward (DDP bucketing, Megatron --overlap-grad-reduce / --overlap-param-gather)",
    "tp": "sequence parallelism with TP communication overlap (--tp-comm-overlap), or a smaller TP inside one node",
    "pp": "more micro-batches per pipeline or interleaved stages (virtual pipeline) so the sends overlap compute",
    "cp": "overlap the context-parallel KV exchange with attention (ring attention overlap), or a smaller CP",
    "ep": "overlap the expert all-to-all with compute (EP overlap / DeepEP), or a smaller EP",
}
#: exposed communication dimension -> the --set that turns its overlap on, when the configuration has it off
_COMM_SET = {"dp": ("overlap_grad_reduce", "overlap_grad_reduce=true"), "tp": ("tp_comm_overlap", "tp_comm_overlap=true")}


def _recompute_cause(analysis, cfg) -> str:
    parts = ["activation recompute: forward ops run again in backward"]
    if cfg is not None:
        parts.append(f"configured granularity {cfg.recompute.granularity!r}")
    ops = analysis.recomputed_by_name
    if ops is not None and ops.height:
        top = ops.group_by("name").agg(pl.col("gpu_ns").sum()).sort("gpu_ns", descending=True).head(3)["name"].to_list()
        parts.append("top recomputed ops: " + ", ".join(top))
    return "; ".join(parts)


def _price(cfg, analysis, sets: list[str]) -> tuple[float | None, str | None, bool | None]:
    """(gain ms per step, note, fits) of ``sets`` through the what-if model, or (None, why, None)."""
    from traceanalyzer.errors import TraceAnalyzerError
    from traceanalyzer.reconciliation.anchor import whatif

    try:
        w = whatif(cfg, sets, analysis=analysis)
    except (TraceAnalyzerError, ValueError, KeyError, ZeroDivisionError) as exc:
        return None, f"the what-if model cannot price {' '.join(sets)}: {' '.join(str(exc).split())[:160]}", None
    a, p = w.row(0, named=True), w.row(1, named=True)
    fits = p.get("fits")
    note = f"what-if --set {' '.join(sets)}: {1e3 * a['step_time_s']:.3f} -> {1e3 * p['step_time_s']:.3f} ms per step"
    if fits is False:
        note += f" (does not fit in memory: {p['memory_gib']:.1f} GiB)"
    return 1e3 * (a["step_time_s"] - p["step_time_s"]), note, fits


def _per_item(steps: pl.DataFrame, unprofiled: bool) -> tuple[float, float]:
    """(host, GPU) µs per launched item over ``steps`` (rank-steps of the launches table), summed
    as the per-rank verdict sums its steps (:func:`traceanalyzer.classify.launches.verdict`), so
    that the value reads the same in the finding, the verdict table and the report; the host time
    without the profiler's own where ``unprofiled``."""
    launched = steps["launched"].sum() if "launched" in steps.columns else 0
    if not launched or not {"host_ns", "duration_ns", "idle_ns"} <= set(steps.columns):
        col = "host_ns_per_kernel_unprofiled" if unprofiled else "host_ns_per_kernel"
        return steps[col].median() / 1e3, steps["gpu_ns_per_kernel"].median() / 1e3
    host = steps["host_ns"]
    if unprofiled and "profiler_host_ns" in steps.columns:
        host = (host - steps["profiler_host_ns"]).clip(lower_bound=0)
    return host.sum() // launched / 1e3, (steps["duration_ns"] - steps["idle_ns"]).sum() // launched / 1e3


def _cpu_verdict(launches: pl.DataFrame | None) -> str | None:
    if launches is None or launches.height == 0 or "cpu_bound" not in launches.columns:
        return None
    unprof = "host_ns_per_kernel_unprofiled" in launches.columns and launches["host_ns_per_kernel_unprofiled"].is_not_null().any()
    bound = launches.filter(pl.col("cpu_bound"))
    if bound.height == 0:
        if unprof and "cpu_bound_profiled" in launches.columns and launches["cpu_bound_profiled"].any():
            host, gpu = _per_item(launches, unprof)
            return (f"not CPU-bound without the profiler: {host:.1f} µs of host time per launched item (dispatch + launch) "
                    f"against {gpu:.1f} µs of GPU time (CPU-bound as recorded, on {int(launches['cpu_bound_profiled'].sum())} "
                    f"of {launches.height} rank-steps)")
        return None
    host, gpu = _per_item(bound, unprof)
    graphs = " (CUDA graphs in use)" if bool(launches["cuda_graphs"].any()) else ""
    return (f"CPU-bound on {bound.height} of {launches.height} rank-steps{' without the profiler' if unprof else ''}: "
            f"{host:.1f} µs of host time per launched item (dispatch + launch) against {gpu:.1f} µs of GPU time{graphs}")


#: host-bound findings -> the replay's gain column (classify.profiler_cost) and what it removed
_REPLAY = {
    "idle_host_untraced": ("gain_host_untraced_ns", "the host's stalls (100 µs or more outside every recorded op) removed"),
    "idle_host_dataloader": ("gain_host_dataloader_ns", "the host's time in the data loader removed"),
    "idle_host_ops": ("gain_host_ops_ns", "every recorded op's host time removed (an upper bound: CUDA graphs or "
                                          "torch.compile still leave a launch per graph or per fused kernel)"),
    "idle_sync": ("gain_sync_ns", "the host's synchronisations not waited for"),
}
_NOT_PRICED = {
    "idle_host_optimizer": "how much host time a fused or foreach optimizer saves is not in the trace: the replay cannot price it",
    "idle_host_bound": "the trace does not split host-bound idle by what the host did: the replay cannot price one cause",
}
#: host-bound idle the profiler's own work sits in (recorded ops), shrunk by what it added
_DILATED = ("idle_host_ops", "idle_host_optimizer", "idle_host_dataloader", "idle_host_bound")


def _profiler_share(st: pl.DataFrame) -> dict[str, float] | None:
    """Mean per step of the measured step, what the profiler added and the unprofiled estimate
    (ms), over the rank-steps that have an estimate; None without any."""
    if "unprofiled_estimate_ns" not in st.columns:
        return None
    est = st.filter(pl.col("unprofiled_estimate_ns").is_not_null())
    if est.height == 0:
        return None
    return {"step_ms": est["duration_ns"].mean() / 1e6, "added_ms": est["profiler_overhead_ns"].mean() / 1e6,
            "host_ms": est["profiler_host_ns"].mean() / 1e6, "unprofiled_ms": est["unprofiled_estimate_ns"].mean() / 1e6,
            "rank_steps": est.height}


def _replay_gain(st: pl.DataFrame, loss: str) -> tuple[float | None, str | None]:
    """(gain ms per step, note) of removing a host-bound loss, from the replay, or (None, why)."""
    if loss in _NOT_PRICED:
        return None, _NOT_PRICED[loss]
    col, what = _REPLAY[loss]
    if col not in st.columns or st[col].is_null().all():
        why = st["profiler_note"].drop_nulls().first() if "profiler_note" in st.columns else None
        return None, f"the replay cannot price it: {why or 'the trace has no host -> GPU dependencies to replay'}"
    got = st.filter(pl.col(col).is_not_null())
    gain = got[col].mean() / 1e6
    base = got["unprofiled_estimate_ns"].mean() / 1e6
    return gain, (f"replay of the step without the profiler, with {what}: {base:.3f} -> {base - gain:.3f} ms per step"
                  + (f" (the {st.height - got.height} rank-steps without a replay left out)" if got.height < st.height else ""))


def pricing_config(cfg: RunConfig | None) -> RunConfig | None:
    """The run configuration ``cfg`` when it can price findings, or None (none given; one without
    a model, e.g. only a ``[trace]`` section: the findings then say they cannot be priced)."""
    if cfg is None:
        return None
    return cfg if cfg.model.layers or cfg.model.fwd_flops_per_sample else None


def _options(analysis, file: str) -> list[str]:
    """The profiler options ``file``'s header lists, as the analysis carries them (read by the
    engine; none for an analysis that does not carry them)."""
    return (getattr(analysis, "profiler_options", None) or {}).get(file, [])


def _profiler_costs(analysis) -> list[str]:
    """The costly profiler options any rank's file was recorded with (its header)."""

    meta = analysis.trace.meta
    if "file" not in meta.columns:
        return []
    on: set[str] = set()
    for f in meta["file"].drop_nulls().unique().to_list()[:64]:  # a few ranks say it
        on.update(o for o in _options(analysis, f) if o in COSTLY)
    return [o for o in COSTLY if o in on]


def findings(analysis, cfg=None, launches: pl.DataFrame | None = None, top: int = MAX_FINDINGS,
             checks: list[dict] | None = None) -> list[dict[str, Any]]:
    """The largest losses of ``analysis`` (see the module docstring), largest first.

    ``cfg``: the run's :class:`~traceanalyzer.model.config.RunConfig` (prices the remedies
    through the what-if model); ``launches``: :func:`traceanalyzer.classify.launches.launches`
    per step (adds the CPU-bound verdict to the host findings); ``checks``: the trace-integrity
    checks (:func:`.integrity.integrity`), accepted for the callers that have them (the findings
    read the same trace facts: no remedy the run already applies, no cause the trace cannot show)."""
    from traceanalyzer.reconciliation import advice

    st = analysis.steps
    if st.height == 0:
        return []
    if launches is None and "launches" in getattr(analysis, "extras", {}):
        from traceanalyzer.classify.launches import with_launch_bound

        launches = with_launch_bound(analysis.extras["launches"])
    profiled = _profiler_costs(analysis)
    applies = advice.run_applies(analysis)
    n = st.height
    step_ms = st["duration_ns"].sum() / n / 1e6
    if step_ms <= 0:
        return []

    def ms(col: str) -> float:
        return float(st[col].sum()) / n / 1e6 if col in st.columns else 0.0

    cands: list[dict[str, Any]] = []

    def add(loss, label, value_ms, cause, remedy, sets=None, note=None):
        cands.append({"loss": loss, "label": label, "ms_per_step": value_ms, "cause": cause, "remedy": remedy,
                      "_sets": sets, "_note": note})

    add("recompute", "recompute", ms("recompute_ns"), _recompute_cause(analysis, cfg),
        advice.recompute_remedy(analysis), sets="recompute")
    dims = [c[len("exposed_comm_"):-3] for c in st.columns if c.startswith("exposed_comm_") and c.endswith("_ns")]
    if dims:
        blind = advice.world_only_dims(analysis)
        for d in dims:
            name = advice.WORLD_UNKNOWN if d in blind else d.upper()
            wait, kernel = advice.comm_wait(analysis, d)
            late = advice.late_arriver(analysis, d) if kernel > 0 and wait >= advice.WAIT_SHARE * kernel else None
            if late is not None and late["ranks"] >= 2:
                add(f"exposed_comm_{d}", f"waiting for rank {late['rank']} at {late['collective']} ({name})",
                    ms(f"exposed_comm_{d}_ns"),
                    f"{wait / 1e6 / n:.3f} of {kernel / 1e6 / n:.3f} ms of {name} collective time per rank-step is wait, "
                    f"not transfer; rank {late['rank']} arrived last at {late['instances']} of {late['of']} matched collectives "
                    f"and the other ranks waited {late['waited_ns'] / 1e6:.3f} ms for it in all ({late['collective_ns'] / 1e6:.3f} ms "
                    f"at {late['collective']})",
                    f"look at what rank {late['rank']} does before its {late['collective']}: the work, data loading or host "
                    "time that makes it late (the others wait for it: overlapping the collective would not remove the wait)",
                    note=f"the what-if model does not price a late rank; removing the wait would save at most "
                         f"{late['per_step_ns'] / 1e6:.3f} ms per rank-step")
                continue
            remedy = _COMM_REMEDY.get(d, "overlap communication with compute (the framework's overlap flags)")
            if d in blind:
                remedy = "overlap communication with compute (the framework's overlap flags); name the group (pg_desc) to tell its dimension"
            add(f"exposed_comm_{d}", f"exposed communication ({name})", ms(f"exposed_comm_{d}_ns"),
                f"{name} collectives the schedule did not hide under compute", remedy, sets=f"comm:{d}")
    else:
        add("exposed_comm", "exposed communication", ms("exposed_comm_ns"), "collectives the schedule did not hide under compute",
            "overlap communication with compute (the framework's overlap flags)")
    verdict = _cpu_verdict(launches)
    share = _profiler_share(st)
    if profiled and share is None:
        verdict = (f"{verdict}; " if verdict else "") + (
            f"recorded with {', '.join(profiled)}: the profiler's own host work inflates host time")
    elif share is not None and share["added_ms"] > 0:
        verdict = (f"{verdict}; " if verdict else "") + (
            f"the profiler added ~{share['added_ms']:.2f} ms of the {share['step_ms']:.2f} ms step")
    if share is not None and share["added_ms"] >= MIN_SHARE * step_ms:
        opts = ", ".join(profiled) if profiled else "its default options"
        add("profiler", "the profiler's own host work", share["added_ms"],
            f"the profiler added ~{share['added_ms']:.2f} ms of {share['step_ms']:.2f} ms per step; unprofiled estimate "
            f"{share['unprofiled_ms']:.2f} ms (recorded with {opts}: {share['host_ms']:.2f} ms of host work per step for the profiler's "
            "own recording, on the thread that launches the GPU's work)",
            "not a loss of the run itself: read the findings, the CPU-bound verdict and MFU on the unprofiled estimate; "
            "record fewer options (record_shapes, profile_memory, with_stack) or fewer steps to shrink it",
            note="not a cost of the unprofiled run: nothing to gain there")
    if applies["graphs"]:
        launch_remedy = ("the run already uses CUDA graphs: capture more of the step in one graph (fewer, larger graphs), "
                         "a larger micro-batch")
    elif applies["compiled"]:
        launch_remedy = ("CUDA graphs: torch.compile(mode=\"reduce-overhead\") (the run is compiled without them), "
                         "a larger micro-batch")
    else:
        launch_remedy = "fewer, larger kernels: CUDA graphs or torch.compile(mode=\"reduce-overhead\"), a larger micro-batch"
    host_parts = {"dataloader": ms("idle_host_dataloader_ns"), "optimizer": ms("idle_host_optimizer_ns"),
                  "ops": ms("idle_host_ops_ns"), "untraced": ms("idle_host_untraced_ns")}
    if applies["host_events"] is False:
        add("idle_host_bound", "idle: cause unknown (no host events)", ms("idle_host_bound_ns") + ms("idle_other_ns"),
            "the GPU ran dry with no next work queued; the trace holds no host events (a GPU-only capture), so what the "
            "host did meanwhile is unknown",
            "record the host as well (torch.profiler activities CPU and CUDA) to see the cause", note=_HOST)
    elif "idle_host_untraced_ns" not in st.columns:
        add("idle_host_bound", "idle: host-bound", ms("idle_host_bound_ns"), "the GPU waited for launches the host had not made yet",
            "overlap data loading; " + launch_remedy, note=_HOST)
    else:
        add("idle_host_dataloader", "idle: host in the data loader", host_parts["dataloader"],
            "the GPU waited while the host was inside a DataLoader __next__ range",
            "more DataLoader workers, pin_memory=True, prefetching: overlap loading with the step", note=_HOST)
        add("idle_host_optimizer", "idle: host in the optimizer", host_parts["optimizer"],
            "the GPU waited while the host was inside Optimizer.step / zero_grad",
            "a fused or foreach optimizer; zero_grad(set_to_none=True)", note=_HOST)
        add("idle_host_ops", "idle: host dispatching ops", host_parts["ops"],
            "the GPU waited while the host dispatched and launched ops" + (f"; {verdict}" if verdict else ""),
            launch_remedy, note=_HOST)
        add("idle_host_untraced", "idle: host outside every op", host_parts["untraced"],
            "the GPU waited while the host ran no recorded op: Python, sleeps, I/O, a data loader outside DataLoader",
            "find the stall (with_stack=True, py-spy); load data in DataLoader workers, overlapped with the step", note=_HOST)
    sync_cause, sync_remedy = advice.sync_text(analysis)
    add("idle_sync", "idle: sync wait", ms("idle_sync_ns"), sync_cause, sync_remedy,
        note="the what-if model does not price synchronisations")
    add("idle_bubble", "idle: pipeline bubble", ms("idle_bubble_ns"), "pipeline stages waiting for each other",
        "more micro-batches per pipeline, or interleaved stages (virtual pipeline)", sets="bubble")
    add("idle_other", "idle: other", 0.0 if applies["host_events"] is False else ms("idle_other_ns"),
        "the GPU idled with its next work already launched: launch latency, waits on other streams or events",
        "see the critical path (traceanalyzer critical-path) and the timeline (annotate)",
        note="no model of launch latency or stream waits")
    add("other", "other GPU work", ms("other_ns"), "memcpy / memset running under no kernel",
        "avoid host-device copies and memsets in the loop: pinned memory, non_blocking copies, fewer allocations",
        note="the what-if model does not price memory copies")

    if share is not None:
        _unprofile(cands, share)
    kept = sorted((c for c in cands if c["ms_per_step"] > 0 and c["ms_per_step"] >= MIN_SHARE * step_ms),
                  key=lambda c: -c["ms_per_step"])[:top]
    out = []
    for c in kept:
        gain, note, change = None, c["_note"], None
        sets = c["_sets"]
        if c["loss"] in _REPLAY or c["loss"] in _NOT_PRICED:
            gain, note = _replay_gain(st, c["loss"])
        if sets is not None:
            if cfg is None:
                note = _NO_CONFIG
            elif sets == "recompute":
                gain, note, change, fits = None, None, None, None
                for want in ("none", "selective"):
                    if cfg.recompute.granularity == want:
                        continue
                    g, nt, fits = _price(cfg, analysis, [f"recompute={want}"])
                    gain, note, change = g, nt, f"recompute={want}"
                    if g is None or fits is not False:
                        break
                if change is None:
                    note = f"the configuration says recompute {cfg.recompute.granularity!r}: nothing to remove"
            elif sets.startswith("comm:"):
                d = sets[5:]
                flag = _COMM_SET.get(d)
                if flag is None:
                    note = f"the what-if model has no overlap switch for {d.upper()} communication"
                elif getattr(cfg.parallel, flag[0]):
                    note = f"the configuration already has {flag[0]} on"
                else:
                    gain, note, _ = _price(cfg, analysis, [flag[1]])
                    change = flag[1] if gain is not None else None
            elif sets == "bubble":
                if cfg.parallel.pp <= 1:
                    note = "the configuration has no pipeline (pp = 1)"
                else:
                    want = f"vp={max(cfg.parallel.vp, 1) * 2}"
                    gain, note, _ = _price(cfg, analysis, [want])
                    change = want if gain is not None else None
        item = {
            "loss": c["loss"], "label": c["label"], "ms_per_step": round(c["ms_per_step"], 6),
            "share_of_step": round(c["ms_per_step"] / c.get("_of", step_ms), 6), "cause": c["cause"], "remedy": c["remedy"],
            "predicted_gain_ms": None if gain is None else round(gain, 6), "change": change,
            "gain_note": note,
        }
        if "_in_trace" in c:
            item["ms_per_step_in_trace"] = round(c["_in_trace"], 6)
        out.append(item)
    return out


def _unprofile(cands: list[dict[str, Any]], share: dict[str, float]) -> None:
    """The host-bound findings on the step without the profiler: the host-bound idle that sits
    in recorded ops (dispatch, optimizer, data loader) shrunk, in proportion, by what the
    profiler added to the step; their share of the unprofiled step. The measured value stays
    beside it (``_in_trace``)."""
    inside = [c for c in cands if c["loss"] in _DILATED and c["ms_per_step"] > 0]
    total = sum(c["ms_per_step"] for c in inside)
    keep = max(total - share["added_ms"], 0.0) / total if total > 0 else 1.0
    for c in cands:
        if c["loss"] in _DILATED or c["loss"] in _REPLAY:
            c["_in_trace"] = c["ms_per_step"]
            c["_of"] = share["unprofiled_ms"]
            if c["loss"] in _DILATED:
                c["ms_per_step"] = c["ms_per_step"] * keep
                c["cause"] += (f" ({c['_in_trace']:.2f} ms per step in the trace, ~{c['ms_per_step']:.2f} ms without the "
                               "profiler's own host work)")


def profiler_notes(analysis: Any, steps: pl.DataFrame) -> list[dict]:
    """Per rank with a Kineto file: ``rank``, ``options`` (the profiler options on, read from the
    file's header, as the analysis carries them: :attr:`~traceanalyzer.results.Analysis.profiler_options`),
    ``may_inflate_host_time`` (a costly option was on: ``record_shapes``, ``profile_memory``,
    ``with_stack`` add host work to every op) and ``note`` (a sentence when they may have made
    the host look slower than it is, where a step is CPU-bound or the GPU waits on the host)."""
    from traceanalyzer.classify.launches import LAUNCH_BOUND_SHARE

    meta = analysis.trace.meta
    if "file" not in meta.columns:
        return []
    out = []
    for rank, file in meta.select("rank", "file").sort("rank").iter_rows():  # one row per rank
        if file is None:
            continue
        opts = _options(analysis, file)
        costly = [o for o in opts if o in COSTLY]
        mine = steps.filter(pl.col("rank") == rank) if steps.height else steps
        waits = mine.height > 0 and bool(mine.select((pl.col("cpu_bound") | (pl.col("gpu_wait_share") >= LAUNCH_BOUND_SHARE)).any()).item())
        note = None
        if costly and waits:
            note = (f"rank {rank}: the trace was recorded with {', '.join(costly)}: the profiler adds host work to every op, "
                    "so host time (and the GPU's wait on the host) may be larger than without the profiler; "
                    "time a few steps unprofiled to compare")
        out.append({"rank": rank, "options": opts, "may_inflate_host_time": bool(costly), "note": note})
    return out
