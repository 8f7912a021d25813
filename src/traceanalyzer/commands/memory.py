"""``traceanalyzer memory``: predicted memory per GPU, and the measured peak beside it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    QuietOpt, WorkersOpt, config_opt, format_opt, non_negative_number, output_opt, print_warnings, step_range_opt, traces_arg,
)
from traceanalyzer.api.commandline import DEFAULT_RESERVE_GIB, GIB
from traceanalyzer.outputs import Outputs


class MemoryFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def memory(
    paths: Annotated[Optional[list[Path]], traces_arg("Trace file(s) or a directory of rank traces recorded with profile_memory=True (optional).", required=False)] = None,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML) for the prediction.")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch script, arguments or a training log.")] = None,
    reserve: Annotated[float, typer.Option("--reserve", callback=non_negative_number, metavar="GIB", help="GiB kept free for what the model does not count (CUDA context, NCCL/cuBLAS buffers, fragmentation).")] = DEFAULT_RESERVE_GIB,
    step_range: Annotated[str, step_range_opt()] = "ProfilerStep",
    format: Annotated[MemoryFormat, format_opt("table; json (prediction, measured peaks, copies, timeline); csv (the timeline with a trace, else the components).")] = MemoryFormat.table,
    output: Annotated[Optional[Path], output_opt()] = None,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="Keep parsed traces as Parquet in $TRACEANALYZER_CACHE and reuse them.")] = False,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Memory per GPU by component (weights, gradients, optimizer, activations) and whether it fits; with a trace, the measured peak beside it."""
    from traceanalyzer.api import memory as memory_verb

    outputs = Outputs([*(paths or []), config, megatron_args])
    if output is not None:
        outputs.check(output)
    if not paths and config is None and megatron_args is None:
        raise typer.BadParameter("give a trace, a run configuration (-c run.toml) or both", param_hint="'TRACE' / '-c'")
    result = memory_verb(paths or None, config, megatron_args=megatron_args, reserve_gib=reserve, step_range=step_range,
                         cache=cache, workers=workers, quiet=quiet)
    reserve_bytes = reserve * GIB
    if format is MemoryFormat.json:
        from traceanalyzer.render.json import dumps
        from traceanalyzer.render.memory import document

        with outputs.stream(output) as fh:
            fh.write(dumps(document(result, reserve_bytes)))
    elif format is MemoryFormat.csv:
        frame = result.timeline if paths else result.predicted
        with outputs.stream(output, "w") as fh:
            fh.write(frame.write_csv())
    else:
        from traceanalyzer.render.memory import estimate_sections, measured_sections
        from traceanalyzer.render.predictions import emit
        from traceanalyzer.render.predictions import Format as SectionFormat

        sections = []
        total = None
        if result.estimate is not None:
            sections += estimate_sections(result.estimate, result.fit.to_dicts()[0])
            total = result.estimate.total_bytes
        sections += measured_sections(result.measured, result.copies, total)
        emit(sections, SectionFormat.table, {}, output, outputs)
    print_warnings(result.warnings)


def register(app: typer.Typer) -> None:
    app.command()(memory)
