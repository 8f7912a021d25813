"""``traceanalyzer critical-path``: what each step waited on, piece by piece."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    CacheOpt, QuietOpt, WorkersOpt, analyse_paths, format_opt, out_console, output_opt, print_warnings, step_range_opt, traces_arg,
)
from traceanalyzer.outputs import Outputs


class CpFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def critical_path(
    paths: Annotated[list[Path], traces_arg()],
    step: Annotated[Optional[int], typer.Option("--step", metavar="STEP", help="Only this step (default: every step).")] = None,
    rank: Annotated[Optional[int], typer.Option("--rank", metavar="RANK", help="Only this rank, on its own (default: all ranks, linked through their collectives).")] = None,
    format: Annotated[CpFormat, format_opt("table: summary + longest pieces; json: summary and every segment; csv: every segment.")] = CpFormat.table,
    output: Annotated[Optional[Path], output_opt()] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, help="Longest pieces of the path listed in the table.")] = 10,
    step_range: Annotated[str, step_range_opt()] = "ProfilerStep",
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Ignore step markers: each rank's whole trace is one step.")] = False,
    host_gaps: Annotated[bool, typer.Option("--host-gaps/--no-host-gaps", help="Weigh host time outside every op (Python between ops, sleeps, a slow "
                                             "data loader) as the host's (default); --no-host-gaps: only ops and runtime calls, as in HTA.")] = True,
    infer_waits: Annotated[bool, typer.Option("--infer-waits/--no-infer-waits", help="Link a kernel that started late to the kernel on another stream it waited for.")] = True,
    workers: WorkersOpt = None,
    cache: CacheOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """The critical path of each step: the chain of host work, launches, kernels and waits that sets its length."""
    from traceanalyzer.api import critical_path as compute
    from traceanalyzer.render import critpath as render

    outputs = Outputs(paths)
    if output is not None:
        outputs.check(output)
    # each rank file parsed and classified by a worker, its events kept: the graph needs them all
    analysis = analyse_paths(paths, None if whole_trace else step_range, keep="events", cache=cache, workers=workers, quiet=quiet)
    try:
        cp = compute(analysis, step, rank, host_gaps=host_gaps, infer_waits=infer_waits)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--step'" if "step" in str(exc).split(" in ")[0] else "'--rank'") from None
    if format is CpFormat.table:
        with outputs.stream(output, "w") as fh:
            render.print_critical_path(cp, out_console(None if output is None else fh, 160), top)
    else:
        with outputs.stream(output) as fh:
            fh.write(render.json_bytes(cp) if format is CpFormat.json else render.csv_bytes(cp))
    print_warnings(cp.warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command("critical-path")(critical_path)
