"""``traceanalyzer breakdown``: the exact partition of GPU time per rank and step."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    Engine, TableFormat, comm_patterns, stderr_console, format_opt, positive_number, print_warnings, regex,
    step_name,
)
from traceanalyzer.commands.common import strict_check
from traceanalyzer.render.formats import write
from traceanalyzer.render.frames import frame_bytes
from traceanalyzer.render import json as json_render
from traceanalyzer.api.commandoptions import DEFAULT_BUS_BW_GBPS


@shared_options
def breakdown(
    paths,
    *,
    format: Annotated[TableFormat, format_opt(
        "table: the terminal table; json: the full document; csv / parquet: one row per rank and step, "
        "exact integer nanoseconds (parquet needs -o or a pipe).")] = TableFormat.table,
    output, step_range, whole_trace,
    detail: Annotated[bool, typer.Option("--detail", help="Also print the causes: idle by cause, communication by type/group, recomputed ops, cross-rank skew.")] = False,
    recompute_range: Annotated[Optional[str], typer.Option("--recompute-range", metavar="REGEX", help="Regex of extra host/NVTX ranges whose contents are recompute (e.g. 'CheckpointFunctionBackward').", callback=regex)] = None,
    bus_bw: Annotated[float, typer.Option("--bus-bw", metavar="GB/S", callback=positive_number, help="Bus bandwidth (GB/s) for estimating collective transfer time when only one rank of a group is loaded.")] = DEFAULT_BUS_BW_GBPS,
    comm_kernel, config, cache, workers, engine, address, quiet, ranks, strict,
) -> None:
    """Split every rank's GPU time, per step, into compute / recompute / exposed comm / other / idle."""
    patterns = comm_patterns(comm_kernel, config)
    outputs = checked_outputs([*paths, config], output)
    from traceanalyzer.api.commandline import breakdown_of

    analysis, view = breakdown_of(paths, step_name(step_range, whole_trace), views=format in (TableFormat.json, TableFormat.table) or strict,
                                  config=config, ranks=ranks.value, detail=detail, table=format is TableFormat.table,
                                  recompute_pattern=recompute_range, bus_bw_gbps=bus_bw, cache=cache, workers=workers,
                                  engine=Engine(engine).value, address=address, quiet=quiet, comm_kernels=patterns, console=stderr_console)
    if format is TableFormat.json:
        write(json_render.dumps(flagged(json_render.document(analysis, view["findings"], view["integrity"]))), output, outputs)
    elif format is not TableFormat.table:
        write(frame_bytes(json_render.steps_table(analysis), format.value), output, outputs)
    else:
        from traceanalyzer.render.table import print_breakdown, print_detail

        def table(console) -> None:
            print_breakdown(analysis, console, view["summary"], view["findings"], view["integrity"])
            if detail:
                print_detail(analysis, console, view["summary"], view["stragglers"], view["comm"], view["host_verdict"],
                             view.get("world_only", frozenset()))

        write(table, output, outputs, width=120, file_width=160)
    print_warnings(analysis.warnings, shows_transfer=detail or format is TableFormat.json)
    if strict:
        strict_check(view["integrity"])


def register(app: typer.Typer) -> None:
    app.command()(breakdown)
