"""``traceanalyzer memory``: predicted memory per GPU, and the measured peak beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    DocumentFormat, FrameFormat, config_opt, format_opt, non_negative_number, print_warnings, traces_arg,
)
from traceanalyzer.api.commandoptions import DEFAULT_RESERVE_GIB, GIB
from traceanalyzer.render.formats import write


@shared_options
def memory(
    paths: Annotated[Optional[list[Path]], traces_arg("Trace file(s) or a directory of rank traces recorded with profile_memory=True (optional).", required=False)] = None,
    *,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML) for the prediction.")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch script, arguments or a training log.")] = None,
    reserve: Annotated[float, typer.Option("--reserve", callback=non_negative_number, metavar="GIB", help="GiB kept free for what the model does not count (CUDA context, NCCL/cuBLAS buffers, fragmentation).")] = DEFAULT_RESERVE_GIB,
    step_range,
    format: Annotated[FrameFormat, format_opt("table; json (prediction, measured peaks, copies, timeline); csv (the timeline with a trace, else the components).")] = FrameFormat.table,  # type: ignore[valid-type]
    output,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE and reuse them.")] = False,
    workers, quiet,
) -> None:
    """Memory per GPU by component (weights, gradients, optimizer, activations) and whether it fits; with a trace, the measured peak beside it."""
    from traceanalyzer.api import memory as memory_verb

    outputs = checked_outputs([*(paths or []), config, megatron_args], output)
    if not paths and config is None and megatron_args is None:
        raise typer.BadParameter("give a trace, a run configuration (-c run.toml) or both", param_hint="'TRACE' / '-c'")
    result = memory_verb(paths or None, config, megatron_args=megatron_args, reserve_gib=reserve, step_range=step_range,
                         cache=cache, workers=workers, quiet=quiet)
    from traceanalyzer.render import memory as render

    if format is FrameFormat.json:
        from traceanalyzer.render.json import dumps

        write(dumps(flagged(render.document(result, reserve * GIB))), output, outputs)
    elif format is FrameFormat.csv:
        write(render.csv_text(result, measured=bool(paths)), output, outputs)
    else:
        from traceanalyzer.render.predictions import emit

        emit(render.sections(result), DocumentFormat.table, {}, output, outputs)
    print_warnings(result.warnings)


def register(app: typer.Typer) -> None:
    app.command()(memory)
