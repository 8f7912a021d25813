"""``traceanalyzer reconcile`` and ``traceanalyzer compare``: measured buckets in TFLOP/s beside the theory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    ConfigOpt, DocumentFormat, choices, config_opt,
    stderr_console, format_opt, print_warnings, require_config, trace_arg,
)
from traceanalyzer.api._common import public
from traceanalyzer.api.commandline import compare_of, reconcile_parts
from traceanalyzer.api.commandoptions import CONVENTIONS, HFU_CONVENTIONS
from traceanalyzer.errors import ConfigError
from traceanalyzer.render.predictions import emit, waterfall_sections


Convention = choices("Convention", CONVENTIONS)
HfuConvention = choices("HfuConvention", HFU_CONVENTIONS)


@shared_options
def reconcile(
    trace: Annotated[Path, trace_arg()],
    *,
    config: ConfigOpt = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch arguments or a training log.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configuration's).")] = None,  # type: ignore[valid-type]
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output, step_range,
    hfu: Annotated[HfuConvention, typer.Option("--hfu", help="How recompute counts in HFU.")] = "forward",  # type: ignore[valid-type]
    comm_kernel, cache, workers, quiet,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output: predicted communication at the bandwidth of its message size and scope.")] = None,
    all_rows,
) -> None:
    """Waterfall from peak to achieved TFLOP/s/GPU: every measured loss in TFLOP/s, beside the analytic prediction."""
    require_config(config, megatron_args)
    outputs = checked_outputs([trace, config, megatron_args, *(baseline or [])], output)
    wf, warnings = reconcile_parts(trace, config, megatron_args, convention=getattr(convention, "value", convention), step_range=step_range,
                                   hfu=getattr(hfu, "value", hfu), workers=workers, quiet=quiet, comm_kernels=comm_kernel,
                                   baseline=baseline, cache=cache, console=stderr_console)
    emit(waterfall_sections(wf, all_rows), format, flagged({"schema": "traceanalyzer.reconcile", "schema_version": 1, **public(wf)}), output, outputs)
    print_warnings(warnings, shows_transfer=False)


@shared_options
def compare(
    trace_a: Annotated[Path, trace_arg("Trace A (file or directory).", "TRACE_A")],
    trace_b: Annotated[Path, trace_arg("Trace B (file or directory).", "TRACE_B")],
    *,
    config: Annotated[Optional[Path], config_opt("Run configuration for both traces.")] = None,
    config_a: Annotated[Optional[Path], typer.Option("--config-a", metavar="CONFIG", help="Run configuration of trace A.")] = None,
    config_b: Annotated[Optional[Path], typer.Option("--config-b", metavar="CONFIG", help="Run configuration of trace B.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configurations').")] = None,  # type: ignore[valid-type]
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output, step_range,
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Without run configurations: ignore step markers, each rank's whole GPU span is one step.")] = False,
    comm_kernel, cache, workers, quiet, all_rows,
) -> None:
    """Why does run A beat run B: the gap split exactly into its causes.

    With run configurations: the gap in achieved TFLOP/s/GPU, split into waterfall terms. Without:
    the gap in mean step time, split into the time buckets (compute, exposed comm, idle...)."""
    ca, cb = config_a or config, config_b or config
    if (ca is None) != (cb is None):
        raise ConfigError("a run configuration is missing for one trace: pass --config for both, or --config-a and --config-b")
    outputs = checked_outputs([trace_a, trace_b, ca, cb], output)
    sections, doc, warnings = compare_of(trace_a, trace_b, ca, cb, convention=getattr(convention, "value", convention),
                                         step_range=step_range, whole_trace=whole_trace, comm_kernels=comm_kernel, cache=cache,
                                         workers=workers, quiet=quiet, all_rows=all_rows, console=stderr_console)
    emit(sections, format, flagged(doc), output, outputs)
    print_warnings(warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command()(reconcile)
    app.command()(compare)
