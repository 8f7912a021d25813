"""``traceanalyzer baseline``: nccl-tests / topology health, and the trace's collectives against them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.api.commandoptions import BINARIES
from traceanalyzer.commands.common import shared_options, checked_outputs
from traceanalyzer.commands.common import (
    flagged,
    choices, stderr_console, config_opt, format_opt, positive_number,
    print_warnings, trace_opt,
)
from traceanalyzer.commands.common import DocumentFormat
from traceanalyzer.render.predictions import emit


Collective = choices("Collective", dict.fromkeys(BINARIES.values()))


class Scope(str, Enum):
    intra = "intra"
    inter = "inter"


@shared_options
def baseline(
    files: Annotated[Optional[list[Path]], typer.Argument(metavar="[FILE]...", help="nccl-tests output files (any *_perf binary; a log may hold several tests).", show_default=False)] = None,
    *,
    topo: Annotated[Optional[Path], typer.Option("--topo", metavar="FILE", help="`nvidia-smi topo -m` output.", show_default=False)] = None,
    trace: Annotated[Optional[list[Path]], trace_opt("Trace file(s) or directory: set each collective against the baseline; repeatable.")] = None,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML): with --topo, flags TP groups that span non-NVLink pairs.")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", metavar="NAME", help="GPU for the link figures when the files do not name it (e.g. 'H100 SXM').")] = None,
    nvlink_gbps: Annotated[Optional[float], typer.Option("--nvlink-gbps", metavar="GB/S", callback=positive_number, help="Override the NVLink line rate, GB/s per direction.")] = None,
    net_gbps: Annotated[Optional[float], typer.Option("--net-gbps", metavar="GB/S", callback=positive_number, help="Override the NIC bandwidth per GPU, GB/s per direction.")] = None,
    collective: Annotated[Optional[Collective], typer.Option("--collective", help="Collective of files that do not say.")] = None,  # type: ignore[valid-type]
    nranks: Annotated[Optional[int], typer.Option("--nranks", min=1, metavar="N", help="Rank count of files that do not list their ranks.")] = None,
    scope: Annotated[Optional[Scope], typer.Option("--scope", help="intra or inter (node), for files that do not list their hosts.")] = None,
    all_sizes: Annotated[bool, typer.Option("--all-sizes", help="Show messages below 1 MiB too.")] = False,
    format: Annotated[DocumentFormat, format_opt()] = DocumentFormat.table,  # type: ignore[valid-type]
    output, step_range, cache, workers, quiet,
) -> None:
    """Health of the cluster's own baseline (nccl-tests, nvidia-smi topo -m) and, with --trace, the bus bandwidth each collective reached against it."""
    outputs = checked_outputs([*(files or []), topo, *(trace or [])], output)
    from traceanalyzer.api.commandline import baseline_parts

    sections, doc, warnings = baseline_parts(
        files, topo=topo, trace=trace, config=config, gpu=gpu, nvlink_gbps=nvlink_gbps, net_gbps=net_gbps,
        collective=getattr(collective, "value", collective), nranks=nranks, scope=getattr(scope, "value", scope), all_sizes=all_sizes,
        step_range=step_range, cache=cache, workers=workers, quiet=quiet, console=stderr_console)
    print_warnings(warnings)
    emit(sections, format, flagged(doc), output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(baseline)
