"""Sections for ``traceanalyzer baseline``: nccl-tests health, topology, collective efficiency.

Formatting only: every number comes from :mod:`traceanalyzer.baselines` and
:mod:`traceanalyzer.reconciliation.busbw` frames.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.render.predictions import Section, num


def _size(b: int | None) -> str:
    if b is None:
        return "—"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:g} {unit}"
    return f"{b} B"


def health_sections(summary: pl.DataFrame, rows: pl.DataFrame, all_sizes: bool = False) -> list[Section]:
    out = [Section("nccl-tests: peak bus bandwidth against the link",
                   ["file", "test", "collective", "ranks", "scope", "GPU", "peak busbw GB/s", "at size", "link GB/s", "ratio", "verdict"])]
    for r in summary.iter_rows(named=True):
        out[0].rows.append([
            r["source"].rsplit("/", 1)[-1], str(r["test"]), r["collective"], "—" if r["nranks"] is None else str(r["nranks"]),
            r["scope"], r["device"] or "—", num(r["peak_busbw_gbps"], 2), _size(r["peak_size_bytes"]),
            num(r["link_gbps"], 1), num(r["ratio"], 2), r["verdict"] or "—",
        ])
    links = summary.select("link").drop_nulls().unique()["link"].to_list()
    out[0].notes += [f"link: {x}" for x in sorted(links)]
    sec = Section("nccl-tests: bus bandwidth by message size (out-of-place)",
                  ["file", "collective", "size", "time µs", "algbw GB/s", "busbw GB/s", "ratio", "verdict"])
    shown = rows.filter(pl.col("placement") == "out_of_place")
    if not all_sizes:
        shown = shown.filter(pl.col("size_bytes") >= 2**20)
    for r in shown.iter_rows(named=True):
        sec.rows.append([r["source"].rsplit("/", 1)[-1], r["collective"], _size(r["size_bytes"]), num(r["time_us"], 1),
                         num(r["algbw_gbps"], 2), num(r["busbw_gbps"], 2), num(r["ratio"], 2), r["verdict"] or "—"])
    if not all_sizes:
        sec.notes.append("messages below 1 MiB left out (--all-sizes shows them)")
    return out + [sec]


def topology_sections(devices: pl.DataFrame, pair_counts: pl.DataFrame, tp: pl.DataFrame | None) -> list[Section]:
    dev = Section("Topology: devices", ["device", "name", "CPU affinity", "NUMA", "nearest NIC"])
    for r in devices.iter_rows(named=True):
        dev.rows.append([r["device"], r["name"], r["cpu_affinity"] or "—",
                         "—" if r["numa_affinity"] is None else str(r["numa_affinity"]), r["nearest_nic"] or "—"])
    pairs = Section("Topology: GPU pairs by link", ["link", "path", "pairs"])
    for r in pair_counts.iter_rows(named=True):
        pairs.rows.append([r["link"], r["path"], str(r["pairs"])])
    out = [dev, pairs]
    if tp is not None:
        sec = Section("Tensor-parallel groups", ["group", "GPUs", "weakest link", "non-NVLink pairs", "verdict"])
        for r in tp.iter_rows(named=True):
            sec.rows.append([str(r["group"]), ",".join(r["gpus"]), r["weakest"] or "—", str(r["non_nvlink_pairs"]),
                             "all pairs on NVLink" if r["all_nvlink"] else "spans non-NVLink pairs: TP traffic crosses PCIe"])
        out.append(sec)
    return out


def efficiency_sections(summary: pl.DataFrame, per: pl.DataFrame, limit: int = 40) -> list[Section]:
    s = Section("Collective efficiency in the trace (nccl-tests bus bandwidth formulas)",
                ["type", "group", "ranks", "count", "bytes", "time ms", "busbw GB/s", "reference GB/s (median)", "efficiency (median)", "time basis"])
    for r in summary.iter_rows(named=True):
        s.rows.append([r["coll_type"], r["pg_name"], str(r["group_size"]), str(r["count"]), _size(r["bytes"]),
                       num(r["time_ns"] / 1e6, 3), num(r["busbw_gbps"], 2), num(r["reference_gbps_median"], 1),
                       num(None if r["efficiency_median"] is None else 100 * r["efficiency_median"], 1) + (" %" if r["efficiency_median"] is not None else ""),
                       r["time_basis"]])
    s.notes += sorted({f"reference: {x}" for x in summary["reference"].drop_nulls().to_list()})
    inst = Section("Collective instances", ["rank", "step", "type", "bytes", "time µs", "algbw GB/s", "factor", "busbw GB/s", "reference GB/s", "efficiency"])
    for r in per.head(limit).iter_rows(named=True):
        inst.rows.append([str(r["rank"]), "—" if r["step"] is None else str(r["step"]), r["coll_type"], f"{r['bytes']:,}",
                          num(r["time_ns"] / 1e3, 1), num(r["algbw_gbps"], 3), num(r["bus_factor"], 3), num(r["busbw_gbps"], 3),
                          num(r["reference_gbps"], 1), "—" if r["efficiency"] is None else f"{100 * r['efficiency']:.1f} %"])
    if per.height > limit:
        inst.notes.append(f"first {limit} of {per.height} instances (--format json has all)")
    return [s, inst]


def exposed_split_section(split: pl.DataFrame) -> Section:
    sec = Section("Exposed communication by cause", ["rank", "step", "type", "exposed ms", "wait for peers ms",
                                                     "at reference speed ms", "below reference ms"])
    for r in split.iter_rows(named=True):
        sec.rows.append([str(r["rank"]), "—" if r["step"] is None else str(r["step"]), r["coll_type"],
                         num(r["exposed_ns"] / 1e6, 3), num(r["exposed_wait_ns"] / 1e6, 3),
                         num(r["exposed_link_speed_ns"] / 1e6, 3), num(r["exposed_below_reference_ns"] / 1e6, 3)])
    sec.notes += sorted(set(split["split_basis"].to_list()))
    return sec
