"""``traceanalyzer baseline``: nccl-tests / topology health, and the trace's collectives against them."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import polars as pl
import typer

from traceanalyzer.baselines import BINARIES, health_summary, link_health, read_nccl_tests, read_topology, tp_group_links
from traceanalyzer.outputs import Outputs
from traceanalyzer.commands.common import (
    CacheOpt, OutputOpt, QuietOpt, StepRangeOpt, WorkersOpt, analyse_paths, choices, config_opt, format_opt, positive_number,
    print_warnings, trace_opt,
)
from traceanalyzer.render.predictions import Format, emit
from traceanalyzer.errors import ConfigError


Collective = choices("Collective", dict.fromkeys(BINARIES.values()))


class Scope(str, Enum):
    intra = "intra"
    inter = "inter"


def baseline(
    files: Annotated[Optional[list[Path]], typer.Argument(metavar="[FILE]...", help="nccl-tests output files (any *_perf binary; a log may hold several tests).", show_default=False)] = None,
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
    format: Annotated[Format, format_opt()] = Format.table,
    output: OutputOpt = None,
    step_range: StepRangeOpt = "ProfilerStep",
    cache: CacheOpt = False,
    workers: WorkersOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Health of the cluster's own baseline (nccl-tests, nvidia-smi topo -m) and, with --trace, the bus bandwidth each collective reached against it."""
    outputs = Outputs([*(files or []), topo, *(trace or [])])
    if output is not None:
        outputs.check(output)
    from traceanalyzer.render.linkhealth import efficiency_sections, exposed_split_section, health_sections, topology_sections

    if not files and topo is None and not trace:
        raise ConfigError("give nccl-tests output files, --topo FILE and/or --trace (collectives against the hardware table)")
    collective = getattr(collective, "value", collective)
    scope = getattr(scope, "value", scope)
    sections = []
    doc: dict[str, Any] = {"schema": "traceanalyzer.baseline", "schema_version": 1}
    base = None
    if files:
        base = pl.concat([read_nccl_tests(f, collective=collective, nranks=nranks, scope=scope) for f in files])
        rows = link_health(base, gpu, nvlink_gbps, net_gbps)
        summ = health_summary(base, gpu, nvlink_gbps, net_gbps)
        sections += health_sections(summ, rows, all_sizes)
        doc["nccl_tests"] = {"summary": summ.to_dicts(), "rows": rows.to_dicts()}
    if topo is not None:
        t = read_topology(topo)
        pairs = t.gpu_links().group_by("link", "path", "rank").agg(pl.len().alias("pairs")).sort("rank", "link")
        tp = None
        if config is not None:
            from traceanalyzer.model import load_config

            tp = tp_group_links(t, load_config(config).parallel.tp)
        sections += topology_sections(t.devices, pairs, tp)
        doc["topology"] = {"devices": t.devices.to_dicts(), "links": t.links.to_dicts(),
                           "tp_groups": None if tp is None else tp.to_dicts()}
    elif config is not None:
        raise ConfigError("--config flags TP groups against a topology: give --topo FILE too")
    if trace:
        from traceanalyzer.api import collective_busbw

        an = analyse_paths(list(trace), step_range, cache=cache, workers=workers, quiet=quiet)
        per, summ_c, split = collective_busbw(an, base, gpu)
        if not per.height:
            print_warnings(["no collective in the trace carries a byte count and a group size "
                            "(record_param_comms / NCCL kernel args 'In msg nelems'): nothing to set against the baseline"])
        sections += efficiency_sections(summ_c, per)
        if split.height:
            sections.append(exposed_split_section(split))
        doc["collectives"] = {"summary": summ_c.to_dicts(), "instances": per.to_dicts(), "exposed_split": split.to_dicts()}
    emit(sections, format, doc, output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(baseline)
