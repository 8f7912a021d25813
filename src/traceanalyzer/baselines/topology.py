"""Read ``nvidia-smi topo -m`` output: which GPUs share NVLink, where the NICs sit, CPU/NUMA affinity.

Public surface: :func:`read_topology` / :func:`parse_topology` -> :class:`Topology` with two
frames, and :func:`tp_group_links` (tensor-parallel groups that span non-NVLink pairs).

``Topology.links`` — one row per ordered pair of devices (the matrix as printed, self excluded):

====================  =======================================================================
``a``, ``b``          device labels as printed (``GPU0``, ``NIC3``, ``mlx5_0``)
``a_kind``, ``b_kind``  ``gpu`` | ``nic``
``link``              the matrix cell: ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``
                      (older drivers: ``SOC``, ``PXB``, ``PHB``)
``nvlinks``           the ``#`` of ``NV#`` (bonded NVLinks), null for PCIe paths
``path``              plain words: ``nvlink``, ``one PCIe switch``, ``several PCIe switches``,
                      ``PCIe host bridge``, ``across host bridges (same NUMA node)``,
                      ``across NUMA nodes``
``rank``              closeness, NCCL's order: 0 NVLink, 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS
====================  =======================================================================

``Topology.devices`` — one row per device: ``device``, ``kind``, ``index`` (the number in
``GPUn`` / ``NICn``), ``name`` (NIC name from the ``NIC Legend``, or the column label),
``cpu_affinity`` (as printed, e.g. ``0-55,112-167``), ``numa_affinity`` (Int32, null for N/A),
``gpu_numa_id`` (String as printed), ``nearest_nic`` (GPUs: the closest NIC by ``rank``, ties
to the lower index, null if no NIC is listed).

The matrix is read with tabs or runs of spaces as separators, with ANSI underline codes (as a
terminal prints the header) removed; NIC rows may be absent (the GPU rows carry every GPU–NIC
link). A file without a ``GPU0`` header and matrix rows raises
:class:`~traceanalyzer.errors.InvalidTrace` (exit 4) naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer.baselines.text import read_text
from traceanalyzer.errors import ConfigError, InvalidTrace

_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
_LINK = r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$"
_PATHS = {
    "PIX": ("one PCIe switch", 1),
    "PXB": ("several PCIe switches", 2),
    "PHB": ("PCIe host bridge", 3),
    "NODE": ("across host bridges (same NUMA node)", 4),
    "SYS": ("across NUMA nodes", 5),
    "SOC": ("across NUMA nodes", 5),  # drivers before 2017 printed SOC for SYS
}
_AFFINITY_COLS = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]


@dataclass
class Topology:
    source: str
    links: pl.DataFrame
    devices: pl.DataFrame

    @property
    def gpus(self) -> list[str]:
        return self.devices.filter(pl.col("kind") == "gpu")["device"].to_list()

    def gpu_links(self) -> pl.DataFrame:
        """GPU–GPU pairs only (a < b by index)."""
        return self.links.filter((pl.col("a_kind") == "gpu") & (pl.col("b_kind") == "gpu") & (pl.col("a_index") < pl.col("b_index")))


def read_topology(path: str | Path) -> Topology:
    text, p = read_text(path, "nvidia-smi topo -m output", binary="nvidia-smi topo -m text output")
    return parse_topology(text, source=str(p))


def _kind(col: pl.Expr) -> pl.Expr:
    return pl.when(col.str.starts_with("GPU")).then(pl.lit("gpu")).otherwise(pl.lit("nic"))


def parse_topology(text: str, source: str = "<text>") -> Topology:
    lines = [ln for ln in _strip_ansi(text).splitlines()]
    hdr_i = next((i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"]), None)
    if hdr_i is None:
        raise InvalidTrace("no 'GPU0 GPU1 ...' header line: not nvidia-smi topo -m output", source)
    header = lines[hdr_i]
    # columns: device labels up to the first affinity column ("CPU Affinity" ...)
    cut = min([header.find(c) for c in _AFFINITY_COLS if c in header] or [len(header)])
    cols = header[:cut].split()
    extra = [c for c in _AFFINITY_COLS if c in header]
    ncols = len(cols)
    body = pl.DataFrame({"line": lines[hdr_i + 1:]}).with_row_index("pos").with_columns(
        pl.col("line").str.strip_chars().str.replace_all(r"\s+", " ").str.split(" ").alias("tok")
    ).with_columns(pl.col("tok").list.first().alias("device"))
    rows = body.filter(pl.col("device").is_in(cols) & (pl.col("tok").list.len() >= ncols + 1))
    # the matrix ends at the first line that is not a device row (the Legend follows)
    first_gap = body.filter(~pl.col("device").is_in(cols) & (pl.col("line").str.strip_chars() != ""))
    if first_gap.height:
        rows = rows.filter(pl.col("pos") < first_gap["pos"][0])
    if rows.filter(pl.col("device").str.starts_with("GPU")).height == 0:
        raise InvalidTrace("a 'GPU0 ...' header but no matrix rows: not (complete) nvidia-smi topo -m output", source)
    cells = (
        rows.select("device", pl.col("tok").list.slice(1, ncols).alias("cell"))
        .with_columns(pl.int_ranges(0, pl.col("cell").list.len(), dtype=pl.Int64).alias("ci"))
        .explode("cell", "ci")
        .with_columns(pl.col("ci").replace_strict(dict(enumerate(cols)), return_dtype=pl.String).alias("col"))
    )
    bad = cells.filter(~pl.col("cell").str.contains(_LINK))
    if bad.height:
        r = bad.row(0, named=True)
        raise InvalidTrace(f"row {r['device']}, column {r['col']}: {r['cell']!r} is not a topo link code "
                           "(X, NV#, PIX, PXB, PHB, NODE, SYS)", source)
    idx = lambda c: pl.col(c).str.extract(r"(\d+)$").cast(pl.Int32)  # noqa: E731
    links = (
        cells.filter(pl.col("cell") != "X")
        .select(
            pl.col("device").alias("a"), pl.col("col").alias("b"),
            _kind(pl.col("device")).alias("a_kind"), _kind(pl.col("col")).alias("b_kind"),
            pl.col("cell").alias("link"),
            pl.col("cell").str.extract(r"^NV(\d+)$").cast(pl.Int32).alias("nvlinks"),
        )
        .with_columns(
            idx("a").alias("a_index"), idx("b").alias("b_index"),
            pl.when(pl.col("nvlinks").is_not_null()).then(pl.lit("nvlink"))
            .otherwise(pl.col("link").replace_strict({k: v[0] for k, v in _PATHS.items()}, default=None)).alias("path"),
            pl.when(pl.col("nvlinks").is_not_null()).then(pl.lit(0))
            .otherwise(pl.col("link").replace_strict({k: v[1] for k, v in _PATHS.items()}, default=None)).cast(pl.Int32).alias("rank"),
        )
    )
    # affinity columns: whatever follows the matrix cells on GPU rows, in header order
    aff = rows.select("device", pl.col("tok").list.slice(ncols + 1).alias("rest"))
    aff = aff.with_columns(
        *[pl.col("rest").list.get(i, null_on_oob=True).alias(c) for i, c in enumerate(extra)]
    )
    legend = _nic_legend(lines)
    devices = (
        pl.DataFrame({"device": cols})
        .join(aff.drop("rest"), on="device", how="left")
        .with_columns(_kind(pl.col("device")).alias("kind"), idx("device").alias("index"))
        .with_columns(pl.coalesce(pl.col("device").replace_strict(legend, default=None), pl.col("device")).alias("name"))
    )
    for c in _AFFINITY_COLS:
        if c not in devices.columns:
            devices = devices.with_columns(pl.lit(None, pl.String).alias(c))
    nearest = (
        links.filter((pl.col("a_kind") == "gpu") & (pl.col("b_kind") == "nic"))
        .sort("a", "rank", "b_index")
        .group_by("a", maintain_order=True).agg(pl.col("b").first().alias("nearest_nic"))
        .rename({"a": "device"})
    )
    devices = devices.join(nearest, on="device", how="left").select(
        "device", "kind", "index", "name",
        pl.col("CPU Affinity").alias("cpu_affinity"),
        pl.col("NUMA Affinity").cast(pl.Int32, strict=False).alias("numa_affinity"),
        pl.col("GPU NUMA ID").alias("gpu_numa_id"),
        "nearest_nic",
    )
    return Topology(source=source, links=links, devices=devices)


def _strip_ansi(text: str) -> str:
    return pl.Series([text]).str.replace_all(_ANSI, "").item()


def _nic_legend(lines: list[str]) -> dict[str, str]:
    s = pl.Series(lines, dtype=pl.String)
    m = pl.DataFrame({"l": s}).select(
        pl.col("l").str.extract(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", 1).alias("k"),
        pl.col("l").str.extract(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", 2).alias("v"),
    ).drop_nulls()
    return dict(zip(m["k"].to_list(), m["v"].to_list()))


def tp_group_links(topo: Topology, tp: int) -> pl.DataFrame:
    """Tensor-parallel groups (consecutive GPUs, Megatron's default rank order) and their weakest link.

    One row per group: ``group``, ``gpus`` (list), ``weakest`` (link code), ``all_nvlink`` (bool),
    ``non_nvlink_pairs`` (count of GPU pairs inside the group that do not share NVLink).
    """
    gpus = topo.devices.filter(pl.col("kind") == "gpu").sort("index")
    if tp < 1 or gpus.height % tp:
        raise ConfigError(f"tensor-parallel size {tp} does not divide the {gpus.height} GPUs of the topology", topo.source)
    g = gpus.select("device", "index", (pl.col("index") // tp).alias("group"))
    pairs = (
        topo.gpu_links()
        .join(g.select(pl.col("device").alias("a"), pl.col("group").alias("ga")), on="a")
        .join(g.select(pl.col("device").alias("b"), pl.col("group").alias("gb")), on="b")
        .filter(pl.col("ga") == pl.col("gb"))
    )
    per = pairs.sort("rank", descending=True).group_by("ga", maintain_order=False).agg(
        pl.col("link").first().alias("weakest"),
        (pl.col("rank") > 0).sum().cast(pl.Int32).alias("non_nvlink_pairs"),
    ).rename({"ga": "group"})
    return (
        g.group_by("group").agg(pl.col("device").sort_by("index").alias("gpus"))
        .join(per, on="group", how="left")
        .with_columns(
            pl.col("non_nvlink_pairs").fill_null(0),
            (pl.col("non_nvlink_pairs").fill_null(0) == 0).alias("all_nvlink"),
        )
        .sort("group")
    )
