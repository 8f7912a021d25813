"""``traceanalyzer reconcile`` and ``traceanalyzer compare``: measured buckets in TFLOP/s beside the theory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    AllRowsOpt, CacheOpt, CommKernelOpt, ConfigOpt, OutputOpt, QuietOpt, StepRangeOpt, WorkersOpt, choices, comm_patterns, config_opt, err_console,
    format_opt, print_warnings, step_name, trace_arg,
)
from traceanalyzer.commands.common import require_config
from traceanalyzer.api._common import public
from traceanalyzer.api.documents import time_comparison
from traceanalyzer.api.tables import analysis_with_tables
from traceanalyzer.api.commandline import CONVENTIONS, HFU_CONVENTIONS, advice_check, compare_waterfalls, reconcile_parts, reconcile_with_analysis
from traceanalyzer.errors import ConfigError
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.predictions import (
    Format, advice_check_sections, emit, time_comparison_sections, trace_comparison_sections, waterfall_sections,
)


Convention = choices("Convention", CONVENTIONS)
HfuConvention = choices("HfuConvention", HFU_CONVENTIONS)


def _waterfall(path: Path, config: Optional[Path], megatron_args: Optional[Path], convention, step_range: str,
               hfu="forward", workers: Optional[int] = None, quiet: bool = False, comm_kernel: list[str] | None = None,
               baseline: list[Path] | None = None, cache: bool = False):
    return reconcile_parts(path, config, megatron_args, convention=getattr(convention, "value", convention), step_range=step_range,
                           hfu=getattr(hfu, "value", hfu), workers=workers, quiet=quiet, comm_kernels=comm_kernel, baseline=baseline,
                           cache=cache, console=err_console)


def reconcile(
    trace: Annotated[Path, trace_arg()],
    config: ConfigOpt = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch arguments or a training log.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configuration's).")] = None,  # type: ignore[valid-type]
    format: Annotated[Format, format_opt()] = Format.table,
    output: OutputOpt = None,
    step_range: StepRangeOpt = "ProfilerStep",
    hfu: Annotated[HfuConvention, typer.Option("--hfu", help="How recompute counts in HFU.")] = "forward",  # type: ignore[valid-type]
    comm_kernel: CommKernelOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output: predicted communication at the bandwidth of its message size and scope.")] = None,
    all_rows: AllRowsOpt = False,
) -> None:
    """Waterfall from peak to achieved TFLOP/s/GPU: every measured loss in TFLOP/s, beside the analytic prediction."""
    require_config(config, megatron_args)
    outputs = Outputs([trace, config, megatron_args, *(baseline or [])])
    if output is not None:
        outputs.check(output)
    wf, warnings = _waterfall(trace, config, megatron_args, convention, step_range, hfu, workers, quiet, comm_kernel, baseline, cache)
    emit(waterfall_sections(wf, all_rows), format, {"schema": "traceanalyzer.reconcile", "schema_version": 1, **public(wf)}, output, outputs)
    print_warnings(warnings, shows_transfer=False)


def compare(
    trace_a: Annotated[Path, trace_arg("Trace A (file or directory).", "TRACE_A")],
    trace_b: Annotated[Path, trace_arg("Trace B (file or directory).", "TRACE_B")],
    config: Annotated[Optional[Path], config_opt("Run configuration for both traces.")] = None,
    config_a: Annotated[Optional[Path], typer.Option("--config-a", metavar="CONFIG", help="Run configuration of trace A.")] = None,
    config_b: Annotated[Optional[Path], typer.Option("--config-b", metavar="CONFIG", help="Run configuration of trace B.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configurations').")] = None,  # type: ignore[valid-type]
    format: Annotated[Format, format_opt()] = Format.table,
    output: OutputOpt = None,
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Without run configurations: ignore step markers, each rank's whole GPU span is one step.")] = False,
    comm_kernel: CommKernelOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    all_rows: AllRowsOpt = False,
) -> None:
    """Why does run A beat run B: the gap split exactly into its causes.

    With run configurations: the gap in achieved TFLOP/s/GPU, split into waterfall terms. Without:
    the gap in mean step time, split into the time buckets (compute, exposed comm, idle...)."""
    ca, cb = config_a or config, config_b or config
    if (ca is None) != (cb is None):
        raise ConfigError("a run configuration is missing for one trace: pass --config for both, or --config-a and --config-b")
    outputs = Outputs([trace_a, trace_b, ca, cb])
    if output is not None:
        outputs.check(output)
    if ca is None:
        from traceanalyzer.render.kerneltable import kernel_diff_sections

        patterns = tuple(comm_patterns(comm_kernel))
        steps = step_name(step_range, whole_trace)
        an_a = analysis_with_tables([trace_a], steps, cache=cache, workers=workers, quiet=quiet, comm_kernels=patterns)
        an_b = analysis_with_tables([trace_b], steps, cache=cache, workers=workers, quiet=quiet, comm_kernels=patterns)
        cmp_t, diff = time_comparison(an_a, an_b)
        advice = advice_check(an_a, an_b)
        emit(time_comparison_sections(cmp_t, all_rows) + kernel_diff_sections(diff) + advice_check_sections(advice), format,
             {"schema": "traceanalyzer.compare", "schema_version": 1, "mode": "time",
              "comparison": {**public(cmp_t), "kernels": public(diff)}, "advice": advice}, output, outputs)
        print_warnings([*an_a.warnings, *an_b.warnings], shows_transfer=False)
        return
    if whole_trace:
        raise typer.BadParameter("the waterfall (with run configurations) needs the step markers", param_hint="'--whole-trace'")
    kw = {"convention": getattr(convention, "value", convention), "step_range": step_range, "workers": workers, "quiet": quiet,
          "comm_kernels": comm_kernel, "cache": cache, "console": err_console}
    wa, warn_a, an_a = reconcile_with_analysis(trace_a, ca, None, **kw)
    wb, warn_b, an_b = reconcile_with_analysis(trace_b, cb, None, **kw)
    cmp = compare_waterfalls(wa, wb)
    advice = advice_check(an_a, an_b, ca)
    sections = (waterfall_sections(wa, all_rows) + waterfall_sections(wb, all_rows) + trace_comparison_sections(cmp, all_rows)
                + advice_check_sections(advice))
    emit(sections, format, {"schema": "traceanalyzer.compare", "schema_version": 1, "mode": "waterfall",
                            "a": public(wa), "b": public(wb), "comparison": public(cmp), "advice": advice}, output, outputs)
    print_warnings(list(dict.fromkeys([*warn_a, *warn_b])), shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command()(reconcile)
    app.command()(compare)
