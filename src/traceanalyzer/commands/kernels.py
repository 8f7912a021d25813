"""``traceanalyzer kernels`` and ``traceanalyzer ops``: the kernel and op tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    AddressOpt, CacheOpt, CommKernelOpt, Engine, EngineOpt, OutputOpt, QuietOpt, StepRangeOpt, TableFormat, WholeTraceOpt,
    WorkersOpt, binary_output_check, choices, comm_patterns, config_opt, format_opt, out_console, print_warnings, regex, traces_arg,
)
from traceanalyzer.api.commandline import ELEMENT_BYTES, SORT_KEYS
from traceanalyzer.outputs import Outputs


PathsArg = Annotated[list[Path], traces_arg()]
NameOpt = Annotated[Optional[str], typer.Option("--name", metavar="REGEX", callback=regex, help="Only names matching this regex (searched anywhere in the name).")]
RankOpt = Annotated[Optional[list[int]], typer.Option("--rank", metavar="RANK", help="Only this rank (repeatable).")]
StepOpt = Annotated[Optional[list[int]], typer.Option("--step", metavar="STEP", help="Only this step number, N of ProfilerStep#N (repeatable).")]
TopOpt = Annotated[Optional[int], typer.Option("--top", metavar="N", min=1, help="Show the first N rows after sorting (table default: 20; other formats: all).")]
Precision = choices("Precision", ELEMENT_BYTES)
Sort = choices("Sort", SORT_KEYS)
PrecisionOpt = Annotated[Optional[Precision], typer.Option("--precision", help="Precision of kernels whose name states none (bf16, fp16, fp8, tf32, fp32): needed for bytes and the roofline.")]
FormatOpt = Annotated[TableFormat, format_opt("csv and parquet: integer-ns columns as they are.")]
ConfigOpt = Annotated[Optional[Path], config_opt("Run configuration (TOML): its [trace] section (comm_kernels) is applied.")]
RecomputeOpt = Annotated[Optional[str], typer.Option("--recompute-range", metavar="REGEX", callback=regex, help="Regex of extra host/NVTX ranges whose contents are recompute.")]

DEFAULT_TOP = 20


def _run(what: str, paths, name, rank, step, sort, top, precision, format, output, step_range, whole_trace, recompute_range,
         comm_kernel, config, cache, workers, engine, address, quiet) -> None:
    from traceanalyzer.api import kernels as kernel_verb, ops as op_verb
    from traceanalyzer.api.tables import analysis_with_tables
    from traceanalyzer.api.commandline import check_table_filters
    from traceanalyzer.render import kerneltable as render

    sort = Sort(sort).value
    precision = None if precision is None else Precision(precision).value
    check_table_filters(name, sort, precision, top)
    binary_output_check(format, output)
    patterns = comm_patterns(comm_kernel, config)
    outputs = Outputs([*paths, config])
    if output is not None:
        outputs.check(output)
    an = analysis_with_tables(paths, None if whole_trace else step_range, recompute_range=recompute_range, cache=cache,
                              comm_kernels=tuple(patterns), workers=workers, engine=Engine(engine).value, address=address, quiet=quiet)
    _check_selection(an, rank, step)
    if top is None and format is TableFormat.table:
        top = DEFAULT_TOP
    verb = kernel_verb if what == "kernels" else op_verb
    frame = verb(an, name=name, ranks=rank, steps=step, sort=sort, top=top, precision=precision)
    if format is TableFormat.table:
        devices = sorted({str(d) for d in an.trace.meta.get_column("device_name").drop_nulls().to_list()})
        caption = ("device: " + ", ".join(devices) + "; " if devices else "") + (
            "share: of the selected rank-steps' GPU wall time; roofline: achieved / attainable at the kernel's arithmetic intensity"
        )
        with outputs.stream(output, "w") as fh:
            console = out_console(None if output is None else fh, 200)
            if what == "kernels":
                console.print(render.kernel_rich_table(frame, f"Kernels by {sort} (top {top})", caption))
            else:
                console.print(render.op_rich_table(frame, f"Host ops by {sort} (top {top})", caption))
    elif format is TableFormat.json:
        context = {"sources": [str(s) for s in an.trace.sources], "filters": {"name": name, "rank": rank, "step": step},
                   "sort": sort, "top": top, "precision": precision}
        with outputs.stream(output) as fh:
            fh.write(render.json_document(frame, what, context))
    else:
        from traceanalyzer.render.frames import write_frame

        with outputs.stream(output) as fh:
            write_frame(frame, format.value, fh)
    print_warnings(an.warnings, shows_transfer=False)


def _check_selection(an, rank: list[int] | None, step: list[int] | None) -> None:
    """A --rank or --step that is not in the trace: a usage error naming what there is (exit 2)."""
    def listing(xs: list[int]) -> str:
        return ", ".join(map(str, xs[:16])) + (", ..." if len(xs) > 16 else "")

    ranks = sorted(set(an.steps.get_column("rank").to_list()))
    steps = sorted(set(an.steps.get_column("step").to_list()))
    bad = [r for r in rank or [] if r not in ranks]
    if bad:
        raise typer.BadParameter(f"no rank {bad[0]} with GPU work in the trace (ranks: {listing(ranks)})", param_hint="'--rank'")
    bad = [x for x in step or [] if x not in steps]
    if bad:
        raise typer.BadParameter(f"no step {bad[0]} in the trace (steps: {listing(steps)})", param_hint="'--step'")


def kernels(
    paths: PathsArg,
    name: NameOpt = None,
    rank: RankOpt = None,
    step: StepOpt = None,
    sort: Annotated[Sort, typer.Option("--sort", help="Sort key (total: summed duration; bucket: share of the breakdown).")] = Sort.total,
    top: TopOpt = None,
    precision: PrecisionOpt = None,
    format: FormatOpt = TableFormat.table,
    output: OutputOpt = None,
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: WholeTraceOpt = False,
    recompute_range: RecomputeOpt = None,
    comm_kernel: CommKernelOpt = None,
    config: ConfigOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Every GPU kernel: calls, total/mean/p50/p99 time, its exact share of the breakdown, bucket, stream, achieved TFLOP/s."""
    _run("kernels", paths, name, rank, step, sort, top, precision, format, output, step_range, whole_trace, recompute_range,
         comm_kernel, config, cache, workers, engine, address, quiet)


def ops(
    paths: PathsArg,
    name: NameOpt = None,
    rank: RankOpt = None,
    step: StepOpt = None,
    sort: Annotated[Sort, typer.Option("--sort", help="Sort key (gpu: GPU time of the kernels it launched; total: host time).")] = Sort.gpu,
    top: TopOpt = None,
    precision: PrecisionOpt = None,
    format: FormatOpt = TableFormat.table,
    output: OutputOpt = None,
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: WholeTraceOpt = False,
    recompute_range: RecomputeOpt = None,
    comm_kernel: CommKernelOpt = None,
    config: ConfigOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Every host op by name and input shapes: host time, GPU time of its kernels, FLOPs and achieved TFLOP/s (GEMM, attention)."""
    _run("ops", paths, name, rank, step, sort, top, precision, format, output, step_range, whole_trace, recompute_range,
         comm_kernel, config, cache, workers, engine, address, quiet)


def register(app: typer.Typer) -> None:
    app.command()(kernels)
    app.command()(ops)
