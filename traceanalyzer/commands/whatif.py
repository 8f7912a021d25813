"""``traceanalyzer whatif``: another layout predicted from a measured (or published) step; ``--search`` ranks them all."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from traceanalyzer.commands.common import (
    AllRowsOpt, CommKernelOpt, QuietOpt, WorkersOpt, analyse_paths, comm_patterns, config_opt, format_opt, non_negative_number, output_opt,
    positive_number, print_warnings, step_range_opt,
)
from traceanalyzer.commands.common import require_config
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import load_config
from traceanalyzer.model.config import CONVENTIONS
from traceanalyzer.model.validate import check_positive
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.predictions import Format, emit


def whatif(
    trace: Annotated[Optional[Path], typer.Argument(help="Trace of the anchor run (file or directory of rank traces); "
                                                         "without it the analytic model of the configuration is the anchor.",
                                                    show_default=False)] = None,
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
    format: Annotated[Format, format_opt()] = Format.table,
    output: Annotated[Optional[Path], output_opt()] = None,
    step_range: Annotated[str, step_range_opt()] = "ProfilerStep",
    comm_kernel: CommKernelOpt = None,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
    all_rows: AllRowsOpt = False,
) -> None:
    """What would another layout reach? Each measured term re-derived for the new layout; --search ranks them all."""
    from traceanalyzer.model.whatif import anchor_from_config, apply_sets, project
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis
    from traceanalyzer.render.whatif import search_sections, whatif_sections

    if convention is not None and convention not in CONVENTIONS:
        raise ConfigError(f"--convention {convention!r} is not one of {', '.join(CONVENTIONS)}")
    check_positive("--capacity-gb", capacity_gb)
    if reserve_gb is not None and reserve_gb < 0:
        raise ConfigError(f"--reserve-gb {reserve_gb} must not be negative")
    if not set_ and not search:
        raise typer.BadParameter("give the change with --set KEY=VALUE, or --search", param_hint="'--set'")
    require_config(config, megatron_args)
    outputs = Outputs([trace, config, megatron_args, *(baseline or [])])
    if output is not None:
        outputs.check(output)
    cfg = load_config(config, megatron_args)
    new = apply_sets(cfg, set_ or [])  # checks every --set before the trace is read
    base = None
    if baseline:
        import polars as pl

        from traceanalyzer.baselines import read_nccl_tests

        base = pl.concat([read_nccl_tests(f) for f in baseline], how="diagonal_relaxed")
    warnings: list[str] = []
    if trace is not None:
        patterns = comm_patterns(comm_kernel, config, megatron_args)
        analysis = analyse_paths([trace], step_range, keep="events", workers=workers, quiet=quiet, comm_kernels=patterns)
        warnings += analysis.warnings
        anchor = anchor_from_analysis(analysis, cfg, convention=convention, baseline=base)
    else:
        anchor = anchor_from_config(cfg, convention=convention, baseline=base)
        warnings.append("no trace given: the anchor is the analytic model of the configuration"
                        + (" with the compute time its [reported] throughput implies" if anchor.source == "reported" else
                           " at the peak (give [reported] or a trace to anchor it)"))
    warnings += list(anchor.notes)
    doc: dict[str, Any]
    if search:
        from traceanalyzer.api import search_parts

        found = search_parts(cfg, None, set_ or [], None, top, capacity_gb, reserve_gb, base, convention, anchor=anchor, warnings=warnings)
        df, warnings, doc = found["frame"], found["warnings"], found["document"]
        sections = search_sections(df, top or df.height, found["title"], found["notes"], bound=found["bound"])
    else:
        res = project(anchor, new, capacity_gib=capacity_gb, reserve_gib=reserve_gb)
        if res["predicted"]["memory"] is None:
            warnings.append("the memory model cannot size this configuration: memory per GPU is not predicted")
        sections = whatif_sections(res, all_rows)
        doc = {"schema": "traceanalyzer.whatif", "schema_version": 1, **res}
    warnings = list(dict.fromkeys(warnings))
    doc["warnings"] = warnings
    emit(sections, format, doc, output, outputs)
    print_warnings(warnings, shows_transfer=False)


def register(app: typer.Typer) -> None:
    app.command()(whatif)
