"""``traceanalyzer annotations``: GPU time under each NVTX / record_function range, by bucket."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.commands.common import (
    AddressOpt, CommKernelOpt, Engine, EngineOpt, QuietOpt, WorkersOpt, analyse_paths, comm_patterns, out_console, print_warnings,
    config_opt, format_opt, output_opt, step_range_opt, traces_arg,
)
from traceanalyzer.outputs import Outputs


class FrameFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class Source(str, Enum):
    auto = "auto"
    gpu = "gpu"
    host = "host"


class By(str, Enum):
    step = "step"
    rank = "rank"
    name = "name"


def annotations(
    paths: Annotated[list[Path], traces_arg()],
    name: Annotated[Optional[str], typer.Option("--name", metavar="REGEX", help="Only ranges whose name matches this regex (searched anywhere).")] = None,
    level: Annotated[Optional[int], typer.Option("--level", metavar="N", min=0, help="Only ranges at this nesting level (0: outermost on their thread or stream).")] = None,
    source: Annotated[Source, typer.Option("--source", help="gpu: Kineto's GPU-side range copies (gpu_user_annotation); host: host ranges "
                                           "(record_function, NVTX) projected onto the GPU through their launches; auto: gpu where a rank has them.")] = Source.auto,
    by: Annotated[By, typer.Option("--by", help="step: a row per rank and step; rank: summed over steps; name: summed over ranks and steps.")] = By.step,
    config: Annotated[Optional[Path], config_opt("Run configuration (TOML): adds model FLOPs and MFU per range; its [trace] section applies.")] = None,
    format: Annotated[FrameFormat, format_opt()] = FrameFormat.table,
    output: Annotated[Optional[Path], output_opt()] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", min=1, help="Rows shown in the table (json and csv have all).")] = 40,
    step_range: Annotated[str, step_range_opt()] = "ProfilerStep",
    whole_trace: Annotated[bool, typer.Option("--whole-trace", help="Ignore step markers: analyse each rank's whole GPU span as one step.")] = False,
    comm_kernel: CommKernelOpt = None,
    workers: WorkersOpt = None,
    engine: EngineOpt = Engine.local,
    address: AddressOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """GPU time under each NVTX / record_function range, split into compute / recompute / exposed comm / other / idle."""
    from traceanalyzer.api import annotations as annotation_verb
    from traceanalyzer.api.commandline import check_range_regex, load_config
    from traceanalyzer.render import frames

    check_range_regex(name)
    patterns = comm_patterns(comm_kernel, config)
    outputs = Outputs([*paths, config])
    if output is not None:
        outputs.check(output)
    cfg = None if config is None else load_config(config)
    analysis = analyse_paths(paths, None if whole_trace else step_range, comm_kernels=patterns, extras=("annotations",),
                             engine=engine, workers=workers, address=address, quiet=quiet)
    df = annotation_verb(analysis, name=name, level=level, side=source.value, per=by.value, config=cfg)
    if format is FrameFormat.json:
        with outputs.stream(output) as fh:
            fh.write(frames.json_bytes("annotations", {"rows": df}, source=source.value, by=by.value))
    elif format is FrameFormat.csv:
        with outputs.stream(output) as fh:
            frames.write_csv(df, fh)
    else:
        with outputs.stream(output, "w") as fh:
            console = out_console(None if output is None else fh, 160 if output is None else 200)
            if df.height == 0:
                console.print("no annotation range with GPU work" + (" matches" if name or level is not None else " in the trace"))
            else:
                keep = [c for c in ("rank", "step", "steps", "ranks", "source", "name", "level", "count", "duration_ns", "compute_ns",
                                    "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns", "mfu") if c in df.columns]
                labels = {"exposed_comm_ns": "exposed comm", "count": "n", "duration_ns": "GPU time"}
                frames.print_table(df.select(keep), f"GPU time under each range (by {by.value}; the buckets sum to the GPU time)",
                                   console, limit=top, labels=labels)
    print_warnings(analysis.warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command()(annotations)
