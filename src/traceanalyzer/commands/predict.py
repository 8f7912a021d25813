"""``traceanalyzer predict``: analytic-only what-if for a run configuration (no trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import flagged, checked_outputs, AllRowsOpt, ConfigOpt, OutputOpt, choices, format_opt, fraction, print_warnings
from traceanalyzer.commands.common import require_config
from traceanalyzer.api.commandoptions import CONVENTIONS, HFU_CONVENTIONS
from traceanalyzer.commands.common import DocumentFormat
from traceanalyzer.render.predictions import emit


Convention = choices("Convention", CONVENTIONS)
HfuConvention = choices("HfuConvention", HFU_CONVENTIONS)


def predict(
    config: ConfigOpt = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch script, arguments or a training log.")] = None,
    vs: Annotated[Optional[Path], typer.Option("--vs", metavar="CONFIG", help="Reference configuration (TOML) to compare with; its [reported] throughput sets the kernel efficiency.")] = None,
    global_batch: Annotated[Optional[list[int]], typer.Option("--global-batch", min=1, metavar="N", help="Override the global batch; repeat for a sweep.")] = None,
    convention: Annotated[Optional[Convention], typer.Option("--convention", help="FLOPs convention (default: the configuration's).")] = None,  # type: ignore[valid-type]
    hfu: Annotated[HfuConvention, typer.Option("--hfu", help="How recompute counts in HFU.")] = "forward",  # type: ignore[valid-type]
    kernel_efficiency: Annotated[Optional[float], typer.Option("--kernel-efficiency", metavar="FRACTION", callback=fraction, help="Fraction of peak reached by compute kernels, in (0, 1] (default: implied by [reported], the --vs run, else 1.0).")] = None,
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output: OutputOpt = None,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output: bandwidth by message size instead of the hardware table's; repeatable.")] = None,
    all_rows: AllRowsOpt = False,
) -> None:
    """Predict FLOPs, bubble, recompute and communication of a run; with --vs, split the gap into causes."""
    convention = getattr(convention, "value", convention)
    hfu = getattr(hfu, "value", hfu)
    require_config(config, megatron_args)
    outputs = checked_outputs([config, megatron_args, vs], output)
    from traceanalyzer.api.modelling import predict_parts

    doc, sections, warnings = predict_parts(config, megatron_args, vs, global_batch, convention, hfu, kernel_efficiency, baseline, all_rows=all_rows)
    emit(sections, format, flagged(doc), output, outputs)
    print_warnings(warnings)


def register(app: typer.Typer) -> None:
    app.command()(predict)
