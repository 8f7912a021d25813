"""``traceanalyzer baseline``: nccl-tests / topology health, and the trace's collectives against them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import polars as pl
import typer

from traceanalyzer.baselines import BINARIES, health_summary, link_health, read_nccl_tests, read_topology, tp_group_links
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.predictions import Format, emit
from traceanalyzer.errors import ConfigError


def baseline(
    files: Annotated[Optional[list[Path]], typer.Argument(help="nccl-tests output files (any *_perf binary; a log may hold several tests).", show_default=False)] = None,
    topo: Annotated[Optional[Path], typer.Option("--topo", help="`nvidia-smi topo -m` output.")] = None,
    trace: Annotated[Optional[list[Path]], typer.Option("--trace", "-t", help="Trace file(s) or directory: set each collective against the baseline.")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Run configuration (TOML): with --topo, flags TP groups that span non-NVLink pairs.")] = None,
    gpu: Annotated[Optional[str], typer.Option("--gpu", help="GPU for the link figures when the files do not name it (e.g. 'H100 SXM').")] = None,
    nvlink_gbps: Annotated[Optional[float], typer.Option("--nvlink-gbps", help="Override the NVLink line rate, GB/s per direction.")] = None,
    net_gbps: Annotated[Optional[float], typer.Option("--net-gbps", help="Override the NIC bandwidth per GPU, GB/s per direction.")] = None,
    collective: Annotated[Optional[str], typer.Option("--collective", help=f"Collective of files that do not say ({', '.join(BINARIES.values())}).")] = None,
    nranks: Annotated[Optional[int], typer.Option("--nranks", help="Rank count of files that do not list their ranks.")] = None,
    scope: Annotated[Optional[str], typer.Option("--scope", help="intra or inter, for files that do not list their hosts.")] = None,
    all_sizes: Annotated[bool, typer.Option("--all-sizes", help="Show messages below 1 MiB too.")] = False,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to FILE instead of stdout.")] = None,
) -> None:
    """Health of the cluster's own baseline (nccl-tests, nvidia-smi topo -m) and, with --trace, the bus bandwidth each collective reached against it."""
    outputs = Outputs([*(files or []), topo, *(trace or [])])
    if output is not None:
        outputs.check(output)
    from traceanalyzer.render.linkhealth import efficiency_sections, exposed_split_section, health_sections, topology_sections

    if not files and topo is None and not trace:
        raise ConfigError("give nccl-tests output files, --topo FILE and/or --trace (collectives against the hardware table)")
    if scope is not None and scope not in ("intra", "inter"):
        raise ConfigError(f"--scope {scope!r}: use intra or inter")
    sections = []
    doc: dict[str, Any] = {}
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
        from traceanalyzer.classify.busbw import achieved_busbw, busbw_summary, exposed_split
        from traceanalyzer.commands.common import analyse_paths, print_warnings

        an = analyse_paths(list(trace))
        dev = gpu or next(iter(an.trace.meta["device_name"].drop_nulls().to_list()), None)
        per = achieved_busbw(an.collectives, baseline=base, gpu=dev)
        if not per.height:
            print_warnings(["no collective in the trace carries a byte count and a group size "
                            "(record_param_comms / NCCL kernel args 'In msg nelems'): nothing to set against the baseline"])
        summ_c = busbw_summary(per)
        split = exposed_split(per, an.comm)
        sections += efficiency_sections(summ_c, per)
        if split.height:
            sections.append(exposed_split_section(split))
        doc["collectives"] = {"summary": summ_c.to_dicts(), "instances": per.to_dicts(), "exposed_split": split.to_dicts()}
    emit(sections, format, doc, output, outputs)


def register(app: typer.Typer) -> None:
    app.command()(baseline)
