"""``traceanalyzer whatif``: another layout predicted from a measured (or published) step; ``--search`` ranks them all."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    config_opt, stderr_console, format_opt, non_negative_number, positive_number, print_warnings,
)
from traceanalyzer.commands.common import require_config
from traceanalyzer.api.commandoptions import CONVENTIONS
from traceanalyzer.commands.common import DocumentFormat
from traceanalyzer.render.predictions import emit


@shared_options
def whatif(
    trace: Annotated[Optional[Path], typer.Argument(help="Trace of the anchor run (file or directory of rank traces); "
                                                         "without it the analytic model of the configuration is the anchor.",
                                                    show_default=False)] = None,
    *,
    config: Annotated[Optional[Path], config_opt("Run configuration of the anchor run (TOML).")] = None,
    megatron_args: Annotated[Optional[Path], typer.Option("--megatron-args", metavar="FILE", help="Megatron-LM launch script, arguments or a training log.")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", metavar="KEY=VALUE", help="A change KEY=VALUE (repeatable): tp pp vp dp cp ep micro_batch "
                                                                    "global_batch recompute sequence_parallel distributed_optimizer ... "
                                                                    "With --search: pins that knob.")] = None,
    search: Annotated[bool, typer.Option("--search", help="Rank every valid layout on the same GPUs and global batch by predicted "
                                                          "TFLOP/s/GPU; layouts that do not fit in memory are dropped.")] = False,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, help="Layouts shown by --search (0: all).")] = 10,
    capacity_gb: Annotated[Optional[float], typer.Option("--capacity-gb", callback=positive_number, metavar="GIB", help="Memory of one GPU in GiB (default: [hardware] memory_gb, else the GPU table's).")] = None,
    reserve_gb: Annotated[Optional[float], typer.Option("--reserve-gb", callback=non_negative_number, metavar="GIB", help="Memory kept free per GPU in GiB (CUDA context, NCCL buffers, fragmentation; default 4).")] = None,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output: bandwidth by message size and scope instead of the hardware table's.")] = None,
    convention: Annotated[Optional[str], typer.Option("--convention", metavar="NAME", help=f"FLOPs convention: {', '.join(CONVENTIONS)}.")] = None,
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output, step_range, comm_kernel, workers, quiet, all_rows,
) -> None:
    """What would another layout reach? Each measured term re-derived for the new layout; --search ranks them all."""
    from traceanalyzer.api.commandline import whatif_parts
    from traceanalyzer.api.commandoptions import check_whatif_options

    check_whatif_options(convention, capacity_gb, reserve_gb)
    if not set_ and not search:
        raise typer.BadParameter("give the change with --set KEY=VALUE, or --search", param_hint="'--set'")
    require_config(config, megatron_args)
    outputs = checked_outputs([trace, config, megatron_args, *(baseline or [])], output)
    sections, doc, warnings = whatif_parts(
        trace, config, megatron_args, sets=set_, search=search, top=top, capacity_gb=capacity_gb, reserve_gb=reserve_gb,
        baseline=baseline, convention=convention, step_range=step_range, comm_kernels=comm_kernel, workers=workers, quiet=quiet,
        all_rows=all_rows, console=stderr_console)
    emit(sections, format, flagged(doc), output, outputs)
    print_warnings(warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command()(whatif)
