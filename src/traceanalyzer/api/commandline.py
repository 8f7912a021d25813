"""What each command of the command line runs, beyond the public verbs of
:mod:`traceanalyzer.api`: its options go to one of these functions, and what they give goes
to a renderer. Errors are worded with the command's options (``--config``, ``--reserve-gb``);
``console`` is where the progress of an analysis goes. The command modules import only this
module, :mod:`traceanalyzer.api.commandoptions` (the vocabularies their options offer and the
checks of their values), the verbs, the renderers and the ground (an import contract keeps it so).
"""

from __future__ import annotations as _postponed  # postponed annotations; the name ``annotations`` is the verb's

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import polars as pl

from traceanalyzer.api._common import PathLike, _baseline
from traceanalyzer.api.commandoptions import BadValue, check_selection
from traceanalyzer.api.layouts import search_parts
from traceanalyzer.api.loading import input_fingerprints, pricing_configuration, resolve, run_configuration
from traceanalyzer.api.modelling import _baseline_tables, collective_busbw, waterfall_of
from traceanalyzer.api.tables import analysis_with_tables, annotations, kernels, launches, ops, queue_length
from traceanalyzer.classify.steps import DEFAULT_STEP

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis

# ---------------------------------------------------------------------------------------------
# what each command runs: its options go to one of these, what they give to a renderer
# (``console``: where the progress of an analysis goes; errors name the command's options)


def analyse_files(
    paths: Iterable[PathLike],
    step_name: str | None = DEFAULT_STEP,
    *,
    recompute_pattern: str | None = None,
    bus_bw_gbps: float | None = None,
    cache: bool = False,
    keep: str = "compact",
    workers: int | None = None,
    engine: str = "local",
    address: str | None = None,
    quiet: bool = False,
    comm_kernels: Iterable[str] | None = None,
    extras: tuple[str, ...] = (),
    console: Any = None,
) -> Analysis:
    """Load and classify trace files on the engine (rank files in parallel), with progress on
    ``console`` (a bar on a terminal, a line per rank file otherwise, nothing with ``quiet``; a rich
    console, or a function that makes one where progress is shown).
    ``keep``: what the caller needs beyond the compact tables (a name of
    :data:`traceanalyzer.engine.KEEP`); ``extras``: more optional per-rank tables (names of
    :data:`traceanalyzer.engine.TABLES`). A saved analysis (``.taz``, given alone) is read
    instead, with the options it was saved with, and given the tables ``keep`` and ``extras``
    name."""
    from traceanalyzer.engine import KEEP

    return resolve(list(paths), step_name, tables=(*KEEP[keep], *extras), recompute_range=recompute_pattern, bus_bw_gbps=bus_bw_gbps,
                   comm_kernels=tuple(comm_kernels or ()), cache=cache, workers=workers, engine=engine, address=address, quiet=quiet,
                   console=console)


def load_config(config: PathLike | None = None, megatron_args: PathLike | None = None) -> Any:
    """The run configuration (:class:`~traceanalyzer.model.RunConfig`) of a TOML file and/or
    Megatron-LM arguments (ConfigError naming what is wrong)."""
    from traceanalyzer.model import load_config as load

    return load(config, megatron_args)


def comm_patterns(patterns: Iterable[str] | None, config: PathLike | None = None, megatron_args: PathLike | None = None) -> list[str]:
    """The communication-kernel regexes of a run: ``patterns`` (``--comm-kernel``) and the run
    configuration's ``[trace] comm_kernels``, each checked (ConfigError naming a bad one)."""
    from traceanalyzer.classify.labels import check_comm_pattern
    from traceanalyzer.errors import ConfigError

    out = list(patterns or [])
    for p in out:
        check_comm_pattern(p)
    if config is not None or megatron_args is not None:
        cfg = load_config(config, megatron_args)
        for p in cfg.trace.comm_kernels:
            try:
                check_comm_pattern(p)
            except ConfigError as exc:
                raise ConfigError(exc.message.replace("`comm_kernels`", "[trace] comm_kernels", 1), cfg.source) from None
            if p not in out:
                out.append(p)
    return out


def read_baseline(files: Iterable[PathLike] | None) -> pl.DataFrame | None:
    """nccl-tests output files read and stacked; None without files."""
    files = list(files or [])
    return _baseline(files) if files else None


def breakdown_view(analysis: Analysis, config: PathLike | None = None, *, ranks: str = "auto", detail: bool = False,
                   table: bool = True) -> dict[str, Any]:
    """What ``breakdown`` shows beside the partition: ``integrity`` (the trace-integrity checks),
    ``findings`` (the profiler findings, with the run configuration's), and for the table ``summary`` (the ranks' distribution, when
    ``ranks`` asks for it), ``stragglers``, ``comm`` (the spread of communication) and
    ``host_verdict`` (the host / launch verdict rows; with ``detail``)."""
    from traceanalyzer.reconciliation.findings import findings
    from traceanalyzer.reconciliation.integrity import integrity

    checks = integrity(analysis)
    view: dict[str, Any] = {"integrity": checks, "findings": findings(analysis, pricing_configuration(config), checks=checks)}
    if table:
        from traceanalyzer.classify.rankspread import comm_spread, rank_spread, summarise_ranks
        from traceanalyzer.classify.stragglers import stragglers as find_stragglers

        summary = rank_spread(analysis.steps) if summarise_ranks(len(analysis.trace.ranks), ranks) else None
        view["summary"] = summary
        if detail:
            view["stragglers"] = find_stragglers(analysis.steps)
            view["comm"] = (comm_spread(analysis.comm) if summary is not None and analysis.comm is not None and analysis.comm.height
                            else None)
            from traceanalyzer.views.document import host_verdict

            view["host_verdict"] = host_verdict(analysis)
            from traceanalyzer.reconciliation.advice import world_only_dims

            view["world_only"] = world_only_dims(analysis)
    return view


def breakdown_of(paths: Iterable[PathLike], step_range: str | None = DEFAULT_STEP, *, views: bool = True,
                 config: PathLike | None = None, ranks: str = "auto", detail: bool = False, table: bool = True,
                 **options: Any) -> tuple[Analysis, dict[str, Any]]:
    """(the analysis, :func:`breakdown_view` of it) of ``breakdown``: the trace files analysed
    (``options``: as :func:`analyse_files`'), with what the views need when ``views`` (else the
    view holds no findings and no integrity checks)."""
    analysis = analyse_files(paths, step_range, extras=("launches", "trace_facts") if views else (), **options)
    if not views:
        return analysis, {"findings": None, "integrity": None}
    return analysis, breakdown_view(analysis, config, ranks=ranks, detail=detail, table=table)


def report_of(paths: Iterable[PathLike], *, rank: int | None = None, config: PathLike | None = None, step_range: str = DEFAULT_STEP,
              step_name: str | None = DEFAULT_STEP, comm_kernels: Iterable[str] = (), top: int = 10,
              baseline: Iterable[PathLike] | None = None, command: list[str] | None = None, ranks: str = "auto",
              **options: Any) -> tuple[dict[str, Any], Analysis]:
    """(the report model, the analysis) of ``report``: the files analysed for a report
    (``options``: as :func:`analyse_files`'), then :func:`report_document`; a ``rank`` the trace
    does not have is a :class:`BadValue`."""
    base = read_baseline(baseline)
    analysis = analyse_files(paths, step_name, keep="report", comm_kernels=comm_kernels, extras=("launches", "trace_facts"), **options)
    trace = analysis.trace
    if rank is not None and rank not in trace.ranks:
        raise BadValue(f"no rank {rank} in the trace (it has {len(trace.ranks)}: {trace.ranks[:16]})", "rank")
    return report_document(analysis, rank=rank, config=config, step_range=step_range, step_name=step_name,
                           comm_kernels=comm_kernels, top=top, baseline=base, command=command, ranks=ranks)


def stragglers_of(paths: Iterable[PathLike], step_range: str | None = DEFAULT_STEP, *, tolerance: float = 0.05,
                  **options: Any) -> tuple[dict[str, Any], Analysis]:
    """(:func:`~traceanalyzer.api.straggler_view`, the analysis) of trace files (``options``: as
    :func:`analyse_files`')."""
    from traceanalyzer.api.crossrank import straggler_view

    analysis = analyse_files(paths, step_range, **options)
    return straggler_view(analysis, tolerance=tolerance).to_dict(), analysis  # the document the renderers take


def critical_path_of(paths: Iterable[PathLike], step_range: str | None = DEFAULT_STEP, *, step: int | None = None,
                     rank: int | None = None, host_gaps: bool = True, infer_waits: bool = True, **options: Any) -> Any:
    """:func:`~traceanalyzer.api.critical_path` of trace files (each rank file parsed and
    classified by a worker, its events kept: the graph needs them all); a ``step`` or ``rank``
    the trace does not have is a :class:`BadValue`."""
    from traceanalyzer.api.timeline import critical_path

    analysis = analyse_files(paths, step_range, keep="events", **options)
    try:
        return critical_path(analysis, step, rank, host_gaps=host_gaps, infer_waits=infer_waits)
    except ValueError as exc:
        raise BadValue(str(exc), "step" if "step" in str(exc).split(" in ")[0] else "rank") from None


def annotate_files(paths: list[PathLike], output: Path, outputs: Any, *, merge: bool = False, step_range: str | None = DEFAULT_STEP,
                   **options: Any) -> tuple[list[Path], list[str]]:
    """(the files written, the analysis' warnings) of ``annotate``: the output checked against
    the inputs first, the traces analysed with their events, the annotated traces written
    (``options``: as :func:`analyse_files`')."""
    from traceanalyzer.parsers import discover
    from traceanalyzer.views.annotate import check_output

    check_output(outputs, output, sum(len(discover(Path(p))) for p in paths), merge)  # one file: one rank file or merge, else a directory
    analysis = analyse_files(paths, step_range, keep="events", **options)
    return write_annotated(analysis, output, outputs, merge), analysis.warnings


def table_view(what: str, paths: Iterable[PathLike], *, name: str | None = None, rank: list[int] | None = None,
               step: list[int] | None = None, sort: str = "total", top: int | None = None, precision: str | None = None,
               step_range: str | None = DEFAULT_STEP, recompute_range: str | None = None, comm_kernels: Iterable[str] = (),
               cache: bool = False, workers: int | None = None, engine: str = "local", address: str | None = None,
               quiet: bool = False) -> tuple[pl.DataFrame, Analysis]:
    """(the rows, the analysis they were made from) of ``kernels`` or ``ops`` (``what``) of trace
    files: :func:`~traceanalyzer.api.kernels` / :func:`~traceanalyzer.api.ops` of the files
    analysed once; a ``rank`` or ``step`` the trace does not have is a :class:`BadValue`."""
    an = analysis_with_tables(list(paths), step_range, recompute_range=recompute_range, cache=cache, comm_kernels=tuple(comm_kernels),
                              workers=workers, engine=engine, address=address, quiet=quiet)
    check_selection(an, rank, step)
    verb = kernels if what == "kernels" else ops
    return verb(an, name=name, ranks=rank, steps=step, sort=sort, top=top, precision=precision), an


#: the optional tables each view of ``launches`` needs
LAUNCH_EXTRAS = {"steps": ("launches", "queue"), "queue": ("queue",), "kernels": ("launch_rows",), "queue_series": ("queue_series",)}


def launch_views(analysis: Analysis, view: str, threshold: float = 0.10, *, queue: bool = True) -> tuple[dict[str, pl.DataFrame], list[dict[str, Any]]]:
    """(the frames of a view of ``launches`` by name, the profiler's notes on its steps):
    ``steps`` (with the ``queue`` summary unless ``queue=False``), ``queue``, ``kernels`` or
    ``queue_series``."""
    shown: dict[str, pl.DataFrame] = {}
    notes: list[dict[str, Any]] = []
    if view == "steps":
        from traceanalyzer.reconciliation.findings import profiler_notes

        shown["steps"] = launches(analysis, threshold=threshold)
        notes = profiler_notes(analysis, shown["steps"])
        if queue:
            shown["queue"] = queue_length(analysis)
    elif view == "queue":
        shown["queue"] = queue_length(analysis)
    elif view == "kernels":
        shown["kernels"] = launches(analysis, per="kernel")
    else:
        shown["queue_series"] = queue_length(analysis, series=True)
    return shown, notes


def launch_view(paths: Iterable[PathLike], view: str = "steps", threshold: float = 0.10, *, queue: bool = True,
                step_range: str | None = DEFAULT_STEP, comm_kernels: Iterable[str] = (), workers: int | None = None,
                engine: str = "local", address: str | None = None, quiet: bool = False, console: Any = None
                ) -> tuple[tuple[dict[str, pl.DataFrame], list[dict[str, Any]]], Analysis]:
    """((the frames of the view, the profiler's notes): :func:`launch_views`, the analysis) of
    trace files analysed with the tables the view needs."""
    an = analyse_files(paths, step_range, comm_kernels=comm_kernels, extras=LAUNCH_EXTRAS[view], engine=engine, workers=workers,
                       address=address, quiet=quiet, console=console)
    return launch_views(an, view, threshold, queue=queue), an


def write_annotated(analysis: Analysis, output: Path, outputs: Any, merge: bool) -> list[Path]:
    """Write the annotated traces of an analysis holding its events; the files written."""
    from traceanalyzer.api.timeline import _write_annotated as write

    return write(analysis, output, outputs, merge)


def annotation_view(paths: Iterable[PathLike], *, name: str | None = None, level: int | None = None, source: str = "auto",
                    per: str = "step", config: PathLike | None = None, step_range: str | None = DEFAULT_STEP,
                    comm_kernels: Iterable[str] = (), workers: int | None = None, engine: str = "local",
                    address: str | None = None, quiet: bool = False, console: Any = None) -> tuple[pl.DataFrame, Analysis]:
    """(:func:`~traceanalyzer.api.annotations` of trace files, the analysis), priced with the
    run configuration ``config`` when given."""
    cfg = None if config is None else load_config(config)
    an = analyse_files(paths, step_range, comm_kernels=comm_kernels, extras=("annotations",), engine=engine, workers=workers,
                       address=address, quiet=quiet, console=console)
    return annotations(an, name=name, level=level, side=source, per=per, config=cfg), an  # type: ignore[arg-type]  # side, per: str from the command line


def reconcile_parts(trace: PathLike, config: PathLike | None, megatron_args: PathLike | None = None, *, convention: str | None = None,
                  step_range: str | None = DEFAULT_STEP, hfu: str = "forward", workers: int | None = None, quiet: bool = False,
                  comm_kernels: list[str] | None = None, baseline: Iterable[PathLike] | None = None, cache: bool = False,
                  console: Any = None, _held: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(the waterfall, its warnings with the analysis'): ``reconcile`` of one trace (``_held``:
    a dict that receives the analysis under ``"analysis"``)."""
    cfg = load_config(config, megatron_args)
    patterns = comm_patterns(comm_kernels, config, megatron_args)
    analysis = analyse_files([trace], step_range, keep="events", cache=cache, workers=workers, quiet=quiet, comm_kernels=patterns,
                             console=console)
    wf = waterfall_of(analysis, cfg, convention=convention, hfu=hfu, baseline=read_baseline(baseline))
    if _held is not None:
        _held["analysis"] = analysis
    return wf, [*analysis.warnings, *wf["warnings"]]


def reconcile_with_analysis(trace: PathLike, config: PathLike | None, megatron_args: PathLike | None = None, **kw: Any
                            ) -> tuple[dict[str, Any], list[str], Analysis]:
    """(the waterfall, its warnings, the analysis it was made from): as :func:`reconcile_parts`."""
    held: dict[str, Analysis] = {}
    wf, warnings = reconcile_parts(trace, config, megatron_args, _held=held, **kw)
    return wf, warnings, held["analysis"]


def advice_check(a: Analysis, b: Analysis, config: PathLike | None = None) -> list[dict[str, Any]]:
    """The findings of ``a`` (priced with ``config`` when given) with what ``b`` measured beside
    each: ``compare``'s check of the advice against the next run."""
    from traceanalyzer.reconciliation.advicecheck import check_advice
    from traceanalyzer.reconciliation.findings import findings

    return check_advice(findings(a, pricing_configuration(config)), a, b)


def compare_waterfalls(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The gap between two waterfalls, split exactly into their terms."""
    from traceanalyzer.reconciliation import compare

    return compare(a, b)


def compare_of(trace_a: PathLike, trace_b: PathLike, config_a: PathLike | None = None, config_b: PathLike | None = None, *,
               convention: str | None = None, step_range: str = DEFAULT_STEP, whole_trace: bool = False,
               comm_kernels: list[str] | None = None, cache: bool = False, workers: int | None = None, quiet: bool = False,
               all_rows: bool = False, console: Any = None) -> tuple[list[Any], dict[str, Any], list[str]]:
    """(the sections, the document, the warnings) of ``compare``: the gap in mean step time split
    into the time buckets, or with run configurations the gap in TFLOP/s/GPU split into waterfall
    terms; the advice of A checked against B either way."""
    from traceanalyzer.api._common import public
    from traceanalyzer.api.documents import time_comparison
    from traceanalyzer.render.predictions import (
        advice_check_sections, time_comparison_sections, trace_comparison_sections, waterfall_sections,
    )

    doc: dict[str, Any] = {"schema": "traceanalyzer.compare", "schema_version": 1}
    if config_a is None:
        from traceanalyzer.render.kerneltable import kernel_diff_sections

        opts = {"cache": cache, "workers": workers, "quiet": quiet, "comm_kernels": tuple(comm_patterns(comm_kernels))}
        steps = None if whole_trace else step_range
        an_a, an_b = analysis_with_tables([trace_a], steps, **opts), analysis_with_tables([trace_b], steps, **opts)
        cmp_t, diff = time_comparison(an_a, an_b)
        advice = advice_check(an_a, an_b)
        doc.update(mode="time", comparison={**public(cmp_t), "kernels": public(diff)}, advice=advice)
        sections = time_comparison_sections(cmp_t, all_rows) + kernel_diff_sections(diff) + advice_check_sections(advice)
        return sections, doc, [*an_a.warnings, *an_b.warnings]
    if whole_trace:
        raise BadValue("the waterfall (with run configurations) needs the step markers", "whole_trace")
    kw = {"convention": convention, "step_range": step_range, "workers": workers, "quiet": quiet, "comm_kernels": comm_kernels,
          "cache": cache, "console": console}
    wa, warn_a, an_a = reconcile_with_analysis(trace_a, config_a, None, **kw)
    wb, warn_b, an_b = reconcile_with_analysis(trace_b, config_b, None, **kw)
    cmp = compare_waterfalls(wa, wb)
    advice = advice_check(an_a, an_b, config_a)
    doc.update(mode="waterfall", a=public(wa), b=public(wb), comparison=public(cmp), advice=advice)
    sections = (waterfall_sections(wa, all_rows) + waterfall_sections(wb, all_rows) + trace_comparison_sections(cmp, all_rows)
                + advice_check_sections(advice))
    return sections, doc, list(dict.fromkeys([*warn_a, *warn_b]))


def plan_parts(tokens: float | str, config: PathLike | None = None, megatron_args: PathLike | None = None, *,
             trace: Iterable[PathLike] | None = None, convention: str = "6nt", hardware_flops: bool = False,
             params: float | str | None = None, store: PathLike | None = None, job: str | None = None,
             margin: Iterable[str] | None = None, step_range: str | None = DEFAULT_STEP, cache: bool = False,
             workers: int | None = None, quiet: bool = False, console: Any = None, **options: Any) -> dict[str, Any]:
    """``plan`` with everything the command line gives: the throughput measured on ``trace``
    (with the run configuration), the jitter margin from the step-time spread of a batch
    ``store``'s runs, margins overridden as ``NAME=LOW-HIGH``; ``options``: as in :func:`plan`."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model.runplan import plan_run as run_plan, trace_measurement

    cfg = None
    if config is not None or megatron_args is not None:
        cfg = load_config(config, megatron_args)
    margins: dict[str, tuple[float, float] | float | str] = {}
    for m in margin or []:
        name, sep, val = m.partition("=")
        if not sep or not val:
            raise ConfigError(f"`margin` {m!r}: expected NAME=LOW-HIGH, e.g. jitter=5-10%")
        margins[name.strip()] = val.strip()
    flops = "hardware" if hardware_flops else "model"
    measured = None
    trace = list(trace or [])
    if trace:
        if cfg is None:
            raise ConfigError("`trace` needs the run configuration (`config`) for the FLOPs of one step")
        an = analyse_files(trace, step_range, cache=cache, workers=workers, quiet=quiet, console=console)
        measured = trace_measurement(cfg, an.steps, convention, flops, params)
    run_steps = None
    if store is not None:
        from traceanalyzer.store.trend import trend_frame

        run_steps = (trend_frame(store, "step_time", job=job)["value"] / 1e3).to_list()  # ms -> s
    return run_plan(tokens, cfg, params=params, convention=convention, flops=flops, measured=measured, margins=margins,
                    run_step_times=run_steps, **options)


def baseline_parts(files: Iterable[PathLike] | None = None, *, topo: PathLike | None = None, trace: Iterable[PathLike] | None = None,
                   config: PathLike | None = None, gpu: str | None = None, nvlink_gbps: float | None = None,
                   net_gbps: float | None = None, collective: str | None = None, nranks: int | None = None,
                   scope: str | None = None, all_sizes: bool = False, step_range: str | None = DEFAULT_STEP, cache: bool = False,
                   workers: int | None = None, quiet: bool = False, console: Any = None) -> tuple[list[Any], dict[str, Any], list[str]]:
    """(the sections, the document, the warnings) of ``baseline``: the health of nccl-tests
    files, a topology (with the TP groups of ``config``), and the collectives of ``trace``
    against them; ``all_sizes``: the sections show messages below 1 MiB too."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.render.linkhealth import efficiency_sections, exposed_split_section, health_sections, topology_sections

    files, trace = list(files or []), list(trace or [])
    if not files and topo is None and not trace:
        raise ConfigError("give nccl-tests output files, --topo FILE and/or --trace (collectives against the hardware table)")
    out, base, t = _baseline_tables(files, topo, config, gpu, nvlink_gbps, net_gbps, collective, nranks, scope)
    sections: list[Any] = []
    doc: dict[str, Any] = {"schema": "traceanalyzer.baseline", "schema_version": 1}
    warnings: list[str] = []
    if files:
        sections += health_sections(out["health"], out["nccl_tests"], all_sizes)
        doc["nccl_tests"] = {"summary": out["health"].to_dicts(), "rows": out["nccl_tests"].to_dicts()}
    if t is not None:
        pairs = t.gpu_links().group_by("link", "path", "rank").agg(pl.len().alias("pairs")).sort("rank", "link")
        tp = out.get("tp_groups")
        sections += topology_sections(t.devices, pairs, tp)
        doc["topology"] = {"devices": t.devices.to_dicts(), "links": t.links.to_dicts(),
                           "tp_groups": None if tp is None else tp.to_dicts()}
    if trace:
        an = analyse_files(trace, step_range, cache=cache, workers=workers, quiet=quiet, console=console)
        per, summ_c, split = collective_busbw(an, base, gpu)
        if not per.height:
            warnings.append("no collective in the trace carries a byte count and a group size "
                            "(record_param_comms / NCCL kernel args 'In msg nelems'): nothing to set against the baseline")
        sections += efficiency_sections(summ_c, per)
        if split.height:
            sections.append(exposed_split_section(split))
        doc["collectives"] = {"summary": summ_c.to_dicts(), "instances": per.to_dicts(), "exposed_split": split.to_dicts()}
    return sections, doc, warnings


def whatif_parts(trace: PathLike | None, config: PathLike | None, megatron_args: PathLike | None = None, *,
                 sets: list[str] | None = None, search: bool = False, top: int = 10, capacity_gb: float | None = None,
                 reserve_gb: float | None = None, baseline: Iterable[PathLike] | None = None, convention: str | None = None,
                 step_range: str | None = DEFAULT_STEP, comm_kernels: list[str] | None = None, workers: int | None = None,
                 quiet: bool = False, all_rows: bool = False, console: Any = None) -> tuple[list[Any], dict[str, Any], list[str]]:
    """(the sections, the document, the warnings) of ``whatif``: the layout changed by ``sets``
    predicted from the anchor (``trace`` measured, else the configuration's analytic model), or
    with ``search`` every layout ranked; ``all_rows``: the sections keep the terms that are zero."""
    from traceanalyzer.model.whatif import anchor_from_config, apply_sets, project
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis
    from traceanalyzer.render.whatif import search_sections, whatif_sections

    cfg = load_config(config, megatron_args)
    new = apply_sets(cfg, sets or [])  # checks every change before the trace is read
    base = read_baseline(baseline)
    warnings: list[str] = []
    if trace is not None:
        patterns = comm_patterns(comm_kernels, config, megatron_args)
        analysis = analyse_files([trace], step_range, keep="events", workers=workers, quiet=quiet, comm_kernels=patterns,
                                 console=console)
        warnings += analysis.warnings
        anchor = anchor_from_analysis(analysis, cfg, convention=convention, baseline=base)
    else:
        anchor = anchor_from_config(cfg, convention=convention, baseline=base)
        warnings.append("no trace given: the anchor is the analytic model of the configuration"
                        + (" with the compute time its [reported] throughput implies" if anchor.source == "reported" else
                           " at the peak (give [reported] or a trace to anchor it)"))
    warnings += list(anchor.notes)
    doc: dict[str, Any]
    if search:
        found = search_parts(cfg, None, sets or [], None, top, capacity_gb, reserve_gb, base, convention, anchor=anchor,
                             warnings=warnings)
        df, warnings, doc = found["frame"], found["warnings"], found["document"]
        sections = search_sections(df, top or df.height, found["title"], found["notes"], bound=found["bound"])
    else:
        res = project(anchor, new, capacity_gib=capacity_gb, reserve_gib=reserve_gb)
        if res["predicted"]["memory"] is None:
            warnings.append("the memory model cannot size this configuration: memory per GPU is not predicted")
        sections = whatif_sections(res, all_rows)
        doc = {"schema": "traceanalyzer.whatif", "schema_version": 1, **res}
    warnings = list(dict.fromkeys(warnings))
    doc["warnings"] = warnings
    return sections, doc, warnings


def report_document(analysis: Analysis, *, rank: int | None = None, config: PathLike | None = None,
                    step_range: str = DEFAULT_STEP, step_name: str | None = DEFAULT_STEP, comm_kernels: Iterable[str] = (),
                    top: int = 10, baseline: pl.DataFrame | None = None, command: list[str] | None = None,
                    ranks: str = "auto") -> tuple[dict[str, Any], Analysis]:
    """(the report model, the analysis it was built on) of an analysis kept for a report: the
    timeline's rank (``rank``, else the slowest) given its GPU work again, classified with
    ``step_name`` and ``comm_kernels`` as the analysis was."""
    from traceanalyzer.engine import Options, with_rank_gpu
    from traceanalyzer.views import document

    shown = rank if rank is not None else document.default_rank(analysis)
    if shown is not None:  # the timeline's rank: its GPU work again (the workers kept only tables)
        analysis = with_rank_gpu(analysis, shown, Options(step_name=step_name, comm_kernels=tuple(comm_kernels)))
    model = document.build(analysis, rank=rank, config=run_configuration(config), inputs=input_fingerprints(analysis.trace.sources, config),
                           step_range=step_range, top=top, baseline=baseline, command=command, ranks=ranks)
    return model, analysis


def trend_parts(store: PathLike, metric: str = "step_time", since: Any = None, job: str | None = None) -> tuple[pl.DataFrame, list[str]]:
    """(the frame of :func:`~traceanalyzer.api.trend`, the damaged files the read of the batch
    ``store`` skipped) of ``trend``."""
    from traceanalyzer.store.database import Store
    from traceanalyzer.store.trend import trend_frame

    st = Store(store)
    return trend_frame(st, metric, since, job), list(st.warnings)


def plot_trend(frame: pl.DataFrame, metric: str, fh: Any) -> None:
    """A PNG plot of a trend frame (:func:`trend`) written to ``fh``."""
    from traceanalyzer.store.trend import plot_trend as plot

    plot(frame, metric, fh)


def gate_parts(store: PathLike, baseline: str, threshold: float, job: str | None = None) -> tuple[list[Any], list[str]]:
    """(the verdict per job of :func:`~traceanalyzer.api.gate` (``passed``, ``message``...), the
    damaged files the read of the batch ``store`` skipped) of ``gate``, ``threshold`` a fraction."""
    from traceanalyzer.store.database import Store
    from traceanalyzer.store.gate import gate_check

    st = Store(store)
    return gate_check(st, baseline, threshold, job), list(st.warnings)


def run_batch(roots: list[Path], store: Path, **options: Any) -> Any:
    """:func:`batch` with its progress reported through the callbacks of
    :func:`traceanalyzer.store.run_batch` (``on_plan``, ``on_done``, ``on_notice``); the summary
    object (see :func:`batch_summary`)."""
    from traceanalyzer.store import run_batch as run

    return run(roots, store, **options)


def decoder_name() -> str:
    """The Kineto decoder in use, as ``traceanalyzer --version`` names it
    (:func:`traceanalyzer.parsers.decoder.name`)."""
    from traceanalyzer.parsers import decoder

    return decoder.name()


def announce_decoder() -> None:
    """The one-line notice when the compiled decoder is missing and no choice was made
    (:func:`traceanalyzer.parsers.decoder.announce`), before any worker process starts."""
    from traceanalyzer.parsers import decoder

    decoder.announce()
