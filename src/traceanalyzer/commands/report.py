"""``traceanalyzer report``: a report to attach to a ticket (HTML, Markdown or JSON)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    AddressOpt, CacheOpt, CommKernelOpt, Engine, EngineOpt, QuietOpt, StepRangeOpt, WholeTraceOpt, WorkersOpt, analyse_paths,
    comm_patterns, config_opt, format_opt, output_opt, print_warnings, step_name, traces_arg,
)
from traceanalyzer.commands.common import RanksOpt, RankView
from traceanalyzer.outputs import Outputs


class ReportFormat(str, Enum):
    html = "html"
    markdown = "markdown"
    json = "json"


def _command(paths: list[Path], config: Path | None, fmt: ReportFormat, embed: bool, output: Path | None,
             rank: int | None, step_range: str, top: int, baseline: list[Path] | None = None, whole_trace: bool = False) -> list[str]:
    """The command line that reproduces this report (canonical form of the options given)."""
    cmd = ["traceanalyzer", "report", *map(str, paths)]
    if config is not None:
        cmd += ["--config", str(config)]
    cmd += ["--format", fmt.value]
    if embed:
        cmd.append("--embed")
    if rank is not None:
        cmd += ["--rank", str(rank)]
    if whole_trace:
        cmd.append("--whole-trace")
    elif step_range != "ProfilerStep":
        cmd += ["--step-range", step_range]
    if top != 10:
        cmd += ["--top", str(top)]
    for b in baseline or []:
        cmd += ["--baseline", str(b)]
    if output is not None:
        cmd += ["-o", str(output)]
    return cmd


def report(
    paths: Annotated[list[Path], traces_arg()],
    output: Annotated[Optional[Path], output_opt("Required for html and markdown; json goes to stdout without it.")] = None,
    format: Annotated[ReportFormat, format_opt("html: one self-contained file; markdown: GitHub-flavoured, PNGs beside it; json: the full report model.")] = ReportFormat.html,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML) for achieved TFLOP/s, MFU and the waterfall; its [trace] section is applied.")] = None,
    embed: Annotated[bool, typer.Option("--embed", help="Markdown: embed the plots as data: URIs instead of PNG files beside it.")] = False,
    rank: Annotated[Optional[int], typer.Option("--rank", min=0, metavar="RANK", help="Rank whose per-step timeline is shown (default: the slowest).")] = None,
    step_range: StepRangeOpt = "ProfilerStep",
    whole_trace: WholeTraceOpt = False,
    top: Annotated[int, typer.Option("--top", min=1, max=1000, metavar="N", help="Rows in the top-kernel and top-collective tables.")] = 10,
    baseline: Annotated[Optional[list[Path]], typer.Option("--baseline", metavar="FILE", help="nccl-tests output of this cluster (repeatable): the collective-efficiency section sets each collective's bus bandwidth against it (default: the hardware table).")] = None,
    comm_kernel: CommKernelOpt = None,
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
    ranks: RanksOpt = RankView.auto,
) -> None:
    """Write a report to attach to a ticket: headline, plots, top kernels and collectives, how to reproduce."""
    from traceanalyzer.api.documents import write_report
    from traceanalyzer.api.commandline import read_baseline, report_document

    if output is None and format is not ReportFormat.json:
        raise typer.BadParameter(f"--format {format.value} writes files: give the report file with -o", param_hint="'-o'")
    patterns = comm_patterns(comm_kernel, config)
    outputs = Outputs([*paths, config, *(baseline or [])])
    if output is not None:
        outputs.check(output)
    base = read_baseline(baseline)
    steps = step_name(step_range, whole_trace)
    analysis = analyse_paths(paths, steps, keep="report", cache=cache, workers=workers, engine=engine, address=address, quiet=quiet,
                             comm_kernels=patterns, extras=("launches", "trace_facts"))
    trace = analysis.trace
    if rank is not None and rank not in trace.ranks:
        raise typer.BadParameter(f"no rank {rank} in the trace (it has {len(trace.ranks)}: {trace.ranks[:16]})", param_hint="'--rank'")
    command = _command(paths, config, format, embed, output, rank, step_range, top, baseline, whole_trace)
    m, analysis = report_document(analysis, rank=rank, config=config, step_range=step_range, step_name=steps, comm_kernels=patterns,
                                  top=top, baseline=base, command=command + ([] if ranks is RankView.auto else ["--ranks", ranks.value]),
                                  ranks=ranks.value)
    write_report(m, output, format.value, outputs, embed=embed)
    print_warnings([*analysis.warnings, *m["notes"]])


def register(app: typer.Typer) -> None:
    app.command()(report)
