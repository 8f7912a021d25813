"""``traceanalyzer reconcile`` and ``traceanalyzer compare``: measured buckets in TFLOP/s beside the theory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from traceanalyzer.commands.common import CommKernelOpt, QuietOpt, WorkersOpt, analyse_paths, comm_patterns, print_warnings
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import load_config
from traceanalyzer.model.config import CONVENTIONS
from traceanalyzer.model.flops import HFU_CONVENTIONS
from traceanalyzer.outputs import Outputs
from traceanalyzer.reconcile import attach_overlapped, compare as compare_waterfalls, compare_time, waterfall
from traceanalyzer.render.predictions import (
    Format, emit, time_comparison_sections, trace_comparison_sections, waterfall_sections,
)


def _public(d: dict[str, Any]) -> dict[str, Any]:
    """Drop the exact fractions (kept for tests and the sum checks) from a JSON document."""
    return {k: v for k, v in d.items() if k != "exact"}


def _waterfall(path: Path, config: Optional[Path], megatron_args: Optional[Path], convention: Optional[str], step_range: str,
               hfu: str = "forward", workers: Optional[int] = None, quiet: bool = False, comm_kernel: list[str] | None = None,
               baseline: list[Path] | None = None):
    if convention is not None and convention not in CONVENTIONS:
        raise ConfigError(f"--convention {convention!r} is not one of {', '.join(CONVENTIONS)}")
    if hfu not in HFU_CONVENTIONS:
        raise ConfigError(f"--hfu {hfu!r} is not one of {', '.join(HFU_CONVENTIONS)}")
    cfg = load_config(config, megatron_args)
    patterns = comm_patterns(comm_kernel, config, megatron_args)
    analysis = analyse_paths([path], step_range, keep="events", workers=workers, quiet=quiet, comm_kernels=patterns)
    base = None
    if baseline:
        import polars as pl

        from traceanalyzer.baselines import read_nccl_tests

        base = pl.concat([read_nccl_tests(f) for f in baseline], how="diagonal_relaxed")
    wf = waterfall(analysis, cfg, convention=convention, step_name=step_range, hfu=hfu, baseline=base)
    attach_overlapped(wf, analysis)
    return wf, [*analysis.warnings, *wf["warnings"]]


def reconcile(
    trace: Annotated[Path, typer.Argument(help="Trace file or directory of rank traces.", show_default=False)],
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration (TOML).")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", help="Megatron-LM launch arguments or a training log.")] = None,
    convention: Annotated[Optional[str], typer.Option("--convention", help=f"FLOPs convention: {', '.join(CONVENTIONS)}.")] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    step_range: Annotated[str, typer.Option("--step-range", help="Name of the range that marks a training step.")] = "ProfilerStep",
    hfu: Annotated[str, typer.Option("--hfu", help=f"How recompute counts in HFU: {', '.join(HFU_CONVENTIONS)}.")] = "forward",
    comm_kernel: CommKernelOpt = None,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", help="nccl-tests output: predicted communication at the bandwidth of its message size and scope.")] = None,
) -> None:
    """Waterfall from peak to achieved TFLOP/s/GPU: every measured loss in TFLOP/s, beside the analytic prediction."""
    outputs = Outputs([trace, config, megatron_args, *(baseline or [])])
    if output is not None:
        outputs.check(output)
    wf, warnings = _waterfall(trace, config, megatron_args, convention, step_range, hfu, workers, quiet, comm_kernel, baseline)
    emit(waterfall_sections(wf), format, _public(wf), output, outputs)
    print_warnings(warnings)


def compare(
    trace_a: Annotated[Path, typer.Argument(help="Trace A (file or directory).", show_default=False)],
    trace_b: Annotated[Path, typer.Argument(help="Trace B (file or directory).", show_default=False)],
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration for both traces.")] = None,
    config_a: Annotated[Optional[Path], typer.Option("--config-a", help="Run configuration of trace A.")] = None,
    config_b: Annotated[Optional[Path], typer.Option("--config-b", help="Run configuration of trace B.")] = None,
    convention: Annotated[Optional[str], typer.Option("--convention", help=f"FLOPs convention: {', '.join(CONVENTIONS)}.")] = None,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
    step_range: Annotated[str, typer.Option("--step-range", help="Name of the range that marks a training step.")] = "ProfilerStep",
    comm_kernel: CommKernelOpt = None,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
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
        from traceanalyzer.classify.tables import analysis_with_tables
        from traceanalyzer.reconcile.kerneldiff import bucket_gaps, kernel_diff
        from traceanalyzer.render.kerneltable import kernel_diff_sections

        patterns = tuple(comm_patterns(comm_kernel))
        an_a = analysis_with_tables([trace_a], step_range, workers=workers, quiet=quiet, comm_kernels=patterns)
        an_b = analysis_with_tables([trace_b], step_range, workers=workers, quiet=quiet, comm_kernels=patterns)
        cmp_t = compare_time(an_a, an_b)
        diff = kernel_diff(an_a, an_b)
        gaps = bucket_gaps(cmp_t)
        assert all(diff["exact"][f"{b}_ns"] == gaps[b] for b in gaps), "kernel diff does not sum to the bucket differences"
        doc = {"comparison": {**_public(cmp_t), "kernels": _public(diff)}}
        emit(time_comparison_sections(cmp_t) + kernel_diff_sections(diff), format, doc, output, outputs)
        print_warnings([*an_a.warnings, *an_b.warnings])
        return
    wa, warn_a = _waterfall(trace_a, ca, None, convention, step_range, workers=workers, quiet=quiet, comm_kernel=comm_kernel)
    wb, warn_b = _waterfall(trace_b, cb, None, convention, step_range, workers=workers, quiet=quiet, comm_kernel=comm_kernel)
    cmp = compare_waterfalls(wa, wb)
    sections = waterfall_sections(wa) + waterfall_sections(wb) + trace_comparison_sections(cmp)
    emit(sections, format, {"a": _public(wa), "b": _public(wb), "comparison": _public(cmp)}, output, outputs)
    print_warnings(list(dict.fromkeys([*warn_a, *warn_b])))


def register(app: typer.Typer) -> None:
    app.command()(reconcile)
    app.command()(compare)
