"""Health verdicts: measured nccl-tests bus bandwidth against the link bandwidth of the hardware.

Public surface: :func:`link_gbps` (the theoretical figure for one collective / scope),
:func:`link_health` (a verdict per row of a :func:`~traceanalyzer.baselines.read_nccl_tests`
frame), :func:`health_summary` (one verdict per test: its peak bus bandwidth) and
:data:`THRESHOLDS`.

The link figure (GB/s per GPU per direction, from :mod:`traceanalyzer.model.hardware`):

* **intra-node**: the NVLink line rate (PCIe cards: the bridge / PCIe rate). NCCL reaches about
  80 % of it: "450GB/s is the line rate. With the protocol overhead (~20%) NCCL can get an
  effective NVLink bandwidth of 370GB/s" (NVIDIA/nccl-tests#212);
* **inter-node**, ring-like collectives (all-reduce, all-gather, reduce-scatter, broadcast,
  reduce): a ring through one NIC per GPU (rail-optimised) is bound by the NICs of a node,
  ``NIC bandwidth per GPU × GPUs per host``, and never above the NVLink line rate;
* **inter-node all-to-all**: one NIC per GPU, times ``nodes / (nodes − 1)`` ("On 2 nodes, 50%
  of the traffic is inter-node so you should see BusBW = 2x network bandwidth per GPU ...
  general formula is N/(N-1)x", NVIDIA/nccl-tests#130); all-to-all cannot aggregate NICs
  (NVIDIA/nccl-tests#267);
* **inter-node send/recv**: one NIC.

Verdicts (ratio = busbw / link): ≥ 1.05 above the line rate (in-network reduction such as
NVLink SHARP, or a tree on few nodes: NCCL's busbw formula assumes a ring); 0.70–1.05 healthy;
0.40–0.70 below par; < 0.40 far below (a broken or misconfigured environment: traffic over PCIe
or TCP instead of NVLink or RDMA). Messages below 64 MiB are latency-bound and get no verdict of
their own ("nccl-tests#212: 256M is too small to reach peak bandwidth").
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.hardware import GPUS, detect_gpu

#: (lower bound of ratio, verdict), checked top-down
THRESHOLDS = [
    (1.05, "above the link's line rate: in-network reduction (NVLink SHARP) or a tree algorithm"),
    (0.70, "healthy: NCCL reaches about 80 % of the line rate"),
    (0.40, "below par: expected about 80 % of the line rate; check NCCL_ALGO/NCCL_PROTO, PCIe/NUMA placement, NIC rails"),
    (0.0, "far below the link: broken or misconfigured environment (traffic over PCIe/TCP instead of NVLink/RDMA?)"),
]
#: smallest message that measures bandwidth rather than latency
MIN_BANDWIDTH_BYTES = 64 * 2**20
_RING = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter", "hypercube"]


def link_gbps(gpu: str | None, collective: str, scope: str, gpus_per_host: int | None = None, nhosts: int | None = None,
              nvlink_gbps: float | None = None, net_gbps: float | None = None) -> tuple[float | None, str]:
    """(theoretical GB/s, what it is) for one collective at one scope; (None, why) when unknown."""
    spec = GPUS.get(detect_gpu(gpu) or "")
    nv = nvlink_gbps if nvlink_gbps is not None else (spec.nvlink_gbps if spec else None)
    net = net_gbps if net_gbps is not None else (spec.net_gbps if spec else None)
    name = spec.name if spec else (gpu or "unknown GPU")
    if scope != "inter":
        if nv is None:
            return None, f"no link figure for {name}: give --gpu or --nvlink-gbps"
        what = f"{name} NVLink line rate {nv:g} GB/s"
        return float(nv), what + (" (scope unknown: compared with NVLink)" if scope != "intra" else "")
    if net is None:
        return None, f"no network figure for {name}: give --gpu or --net-gbps"
    if collective == "all_to_all":
        if not nhosts or nhosts < 2:
            return float(net), f"{name} NIC {net:g} GB/s per GPU"
        return float(net) * nhosts / (nhosts - 1), f"{name} NIC {net:g} GB/s × {nhosts}/{nhosts - 1} nodes"
    if collective == "send_recv" or not gpus_per_host:
        return float(net), f"{name} NIC {net:g} GB/s per GPU"
    agg = float(net) * gpus_per_host
    if nv is not None and agg > nv:
        return float(nv), f"{name} NVLink line rate {nv:g} GB/s (below the node's {gpus_per_host} × {net:g} GB/s NICs)"
    return agg, f"{name} {gpus_per_host} NICs × {net:g} GB/s (one ring per NIC)"


def _verdict(ratio: pl.Expr) -> pl.Expr:
    expr = pl.lit(None, pl.String)
    for lo, text in reversed(THRESHOLDS):
        expr = pl.when(ratio >= lo).then(pl.lit(text)).otherwise(expr)
    return expr


def _links(df: pl.DataFrame, gpu: str | None, nvlink_gbps: float | None, net_gbps: float | None) -> pl.DataFrame:
    keys = df.select("collective", "scope", "gpus_per_host", "nhosts", "device").unique()
    rows = []
    for coll, scope, gph, nh, dev in keys.iter_rows():  # a few test configurations, not events
        g, what = link_gbps(gpu or dev, coll, scope, gph, nh, nvlink_gbps, net_gbps)
        rows.append((coll, scope, gph, nh, dev, g, what))
    return pl.DataFrame(rows, schema={"collective": pl.String, "scope": pl.String, "gpus_per_host": pl.Int32,
                                      "nhosts": pl.Int32, "device": pl.String, "link_gbps": pl.Float64, "link": pl.String},
                        orient="row")


def link_health(df: pl.DataFrame, gpu: str | None = None, nvlink_gbps: float | None = None,
                net_gbps: float | None = None) -> pl.DataFrame:
    """``df`` (nccl-tests frame) + ``link_gbps``, ``link`` (what the figure is), ``ratio``, ``verdict``."""
    keys = ["collective", "scope", "gpus_per_host", "nhosts", "device"]
    out = df.join(_links(df, gpu, nvlink_gbps, net_gbps), on=keys, how="left", nulls_equal=True)
    ratio = pl.col("busbw_gbps") / pl.col("link_gbps")
    return out.with_columns(ratio.alias("ratio")).with_columns(
        pl.when(pl.col("link_gbps").is_null()).then(pl.col("link"))
        .when(pl.col("size_bytes") < MIN_BANDWIDTH_BYTES).then(pl.lit("small message: latency-bound, not a bandwidth test"))
        .otherwise(_verdict(pl.col("ratio"))).alias("verdict")
    )


def health_summary(df: pl.DataFrame, gpu: str | None = None, nvlink_gbps: float | None = None,
                   net_gbps: float | None = None) -> pl.DataFrame:
    """One row per test (source, test): peak out-of-place busbw, the size it was reached at, the
    link figure, ratio and verdict."""
    h = link_health(df.filter(pl.col("placement") == "out_of_place"), gpu, nvlink_gbps, net_gbps)
    peak = (
        h.sort("busbw_gbps", descending=True)
        .group_by("source", "test", maintain_order=True)
        .agg(
            pl.col("collective", "nranks", "nhosts", "scope", "device", "link_gbps", "link").first(),
            pl.col("busbw_gbps").first().alias("peak_busbw_gbps"),
            pl.col("size_bytes").first().alias("peak_size_bytes"),
            pl.col("size_bytes").max().alias("max_size_bytes"),
        )
        .sort("source", "test")
    )
    ratio = pl.col("peak_busbw_gbps") / pl.col("link_gbps")
    return peak.with_columns(ratio.alias("ratio")).with_columns(
        pl.when(pl.col("link_gbps").is_null()).then(pl.col("link"))
        .when(pl.col("max_size_bytes") < MIN_BANDWIDTH_BYTES)
        .then(pl.lit("no message of 64 MiB or more: a latency test; run up to -e 8G to measure bandwidth"))
        .otherwise(_verdict(pl.col("ratio"))).alias("verdict")
    )
