"""Baselines: real nccl-tests and ``nvidia-smi topo -m`` outputs (fixtures/baselines/, sources in
fixtures/README.md) parse to the documented frames; health verdicts and the interpolation are
checked against numbers worked out by hand from the printed tables; damaged or foreign files
exit 4 naming the file."""

from __future__ import annotations

import math

import polars as pl
import pytest

from traceanalyzer.baselines import (
    NCCL_SCHEMA, bus_factor, busbw_at, health_summary, link_health, parse_nccl_tests, read_nccl_tests, read_topology,
    tp_group_links,
)
from traceanalyzer.baselines.health import link_gbps
from traceanalyzer.errors import ConfigError, InvalidTrace

from conftest import FIXTURES, run_cli

B = FIXTURES / "baselines"


def rows(df: pl.DataFrame, placement: str = "out_of_place") -> pl.DataFrame:
    return df.filter(pl.col("placement") == placement).sort("size_bytes")


# ------------------------------------------------------------------ nccl-tests


def test_all_reduce_two_nodes_h100():
    df = read_nccl_tests(B / "all_reduce_perf_h100_2node.txt")
    assert dict(df.schema) == NCCL_SCHEMA
    assert df.height == 62  # 31 sizes (8 B .. 8 GiB) × out-of-place / in-place
    meta = df.select("collective", "nranks", "nranks_source", "nhosts", "gpus_per_host", "scope", "device").unique()
    assert meta.rows() == [("all_reduce", 16, "rank lines", 2, 8, "inter", "NVIDIA H100 80GB HBM3")]
    last = rows(df).row(-1, named=True)
    assert (last["size_bytes"], last["count"], last["dtype"], last["redop"], last["root"]) == (8589934592, 2147483648, "float", "sum", -1)
    assert (last["time_us"], last["algbw_gbps"], last["busbw_gbps"], last["wrong"]) == (47535.0, 180.71, 338.82, "0")
    assert rows(df, "in_place").row(-1, named=True)["busbw_gbps"] == 337.35
    # the printed numbers obey nccl-tests' formulas: algbw = size / time, busbw = algbw × 2(n−1)/n
    big = rows(df).filter(pl.col("size_bytes") >= 2**20)
    algbw = big["size_bytes"] / big["time_us"] / 1e3
    assert ((algbw - big["algbw_gbps"]).abs() < 0.006 + 1e-4 * algbw).all()  # time printed to 4-5 digits
    assert ((big["algbw_gbps"] * 2 * 15 / 16 - big["busbw_gbps"]).abs() < 0.02).all()


def test_alltoall_single_node_and_sendrecv_two_nodes():
    a2a = read_nccl_tests(B / "alltoall_perf_h20_1node.txt")
    assert a2a.select("collective", "nranks", "nhosts", "scope").unique().rows() == [("all_to_all", 8, 1, "intra")]
    r = rows(a2a).row(0, named=True)
    assert (r["size_bytes"], r["redop"], r["root"], r["busbw_gbps"]) == (1048576, "none", -1, 15.78)
    assert rows(a2a, "in_place")["wrong"].to_list() == ["N/A"] * 3
    # alltoall busbw = algbw × (n−1)/n with n = 8: 70.67 × 7/8 = 61.84
    assert abs(70.67 * 7 / 8 - rows(a2a)["busbw_gbps"][-1]) < 0.005
    sr = read_nccl_tests(B / "sendrecv_perf_a40_2node.txt")
    assert sr.select("collective", "nranks", "nhosts", "gpus_per_host", "scope", "device").unique().rows() == [
        ("send_recv", 2, 2, 1, "inter", "NVIDIA A40")]
    assert rows(sr)["size_bytes"].to_list() == [256, 512, 1024, 2048, 4096]


def test_old_layouts_and_missing_rank_lines():
    bc = read_nccl_tests(B / "broadcast_perf_v100_2node_2021.txt")  # no Group, no redop column, root 0
    r = rows(bc).row(0, named=True)
    assert (r["collective"], r["redop"], r["root"], r["wrong"], r["nranks"], r["scope"]) == ("broadcast", None, 0, "N/A", 2, "inter")
    a2a = read_nccl_tests(B / "alltoall_perf_v100_8node_2021.txt")  # 2020 layout: empty redop, 'error' column
    assert rows(a2a)[["size_bytes", "redop", "root", "busbw_gbps", "wrong"]].rows() == [
        (268435456, None, None, 0.51, "0e+00"), (536870912, None, None, 0.51, "0e+00")]
    ar = read_nccl_tests(B / "all_reduce_perf_v100_8node_2021.txt")
    assert rows(ar)[["redop", "root", "time_us", "wrong"]].rows()[0] == ("sum", None, 122131.0, "2e-06")
    # 64 ranks print busbw/algbw = 4.33/2.20: two decimals cannot pin n (51..80 all fit) -> unknown
    assert ar["nranks"].null_count() == ar.height and ar["scope"].unique().to_list() == ["unknown"]
    # -g 2 on one process: busbw/algbw = 1.000 ± 0.0001 pins n = 2 for all-reduce (2(n-1)/n = 1)
    pc = read_nccl_tests(B / "all_reduce_perf_h100pcie_2gpu.txt")
    assert pc.select("nranks", "nranks_source").unique().rows() == [(2, "busbw/algbw ratio")]
    rs = read_nccl_tests(B / "reduce_scatter_perf_2x4gpu.txt", nranks=8, scope="inter")
    assert rs.select("collective", "nranks", "nranks_source", "scope").unique().rows() == [("reduce_scatter", 8, "given", "inter")]
    assert rows(rs)["size_bytes"].to_list() == [0, 0, 0, 0, 0, 128, 256]


def test_all_gather_launcher_prefixes_and_the_2023_layout():
    # srun --label prefixes every line with "  0: "; the binary is named on the srun command line
    text = (B / "all_gather_perf_mi250x_4node_srun.txt").read_text()
    ag = parse_nccl_tests(text, source="log.txt")
    r = rows(ag)
    assert r["collective"].unique().to_list() == ["all_gather"] and r.height == 5
    assert r[["size_bytes", "count", "redop", "root", "time_us", "algbw_gbps", "busbw_gbps"]].row(0) == (65536, 512, "none", -1, 107.5, 0.61, 0.59)
    # rccl-tests 2023: neither redop nor root column
    old = rows(read_nccl_tests(B / "all_gather_perf_mi250x_16rank_2023.txt"))
    assert old[["size_bytes", "count", "redop", "root", "time_us", "busbw_gbps", "wrong"]].row(-1) == (8192, 128, None, None, 34.81, 0.22, "0e+00")
    assert old.height == 8


def test_gb10_modern_header_and_several_tests_in_one_log():
    one = (B / "all_reduce_perf_gb10_2node.txt").read_text()
    two = (B / "alltoall_perf_h20_1node.txt").read_text()
    # a sweep log: the second test is named by its "Collective test starting" line
    log = one + "# Out of bounds values : 0 OK\n# Collective test starting: alltoall_perf\n" + two
    df = parse_nccl_tests(log, source="sweep.log")
    got = df.group_by("test").agg(pl.col("collective").first(), pl.col("nranks").first(), pl.col("scope").first(), pl.len()).sort("test")
    assert got.rows() == [(1, "all_reduce", 2, "inter", 8), (2, "all_to_all", 8, "intra", 6)]


def test_bus_factor():
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75 and bus_factor("reduce_scatter", 2) == 0.5 and bus_factor("all_to_all", 8) == 0.875
    assert bus_factor("broadcast", None) == bus_factor("reduce", 64) == bus_factor("send_recv", 2) == 1.0
    assert bus_factor("all_reduce", None) is None


@pytest.mark.parametrize("text, msg", [
    ("", "empty file"),
    ("hello world\n", "no nccl-tests result table"),
    ('{"traceEvents": []}', "no nccl-tests result table"),
    ("#  size  count  type redop root time algbw busbw #wrong time algbw busbw #wrong\n", "no result rows"),
    ("# Collective test starting: all_reduce_perf\n#  size  count  type\n  1048576  262144  float  sum  -1  203.2  5.16\n", "line 3: result row cut short"),
    ("# Collective test starting: all_reduce_perf\n#  size  count  type\n  1048576  262144  float  sum  -1  203.2  x.16  9.68  0  207.2  5.06  9.49  0\n", "line 3: garbled"),
    ("#  size  count  type\n  1048576  262144  float  sum  -1  203.2  5.16  9.68  0  207.2  5.06  9.49  0\n", "cannot tell which nccl-tests binary"),
])
def test_damaged_or_foreign_text(text, msg):
    with pytest.raises(InvalidTrace, match=msg):
        parse_nccl_tests(text, source="x.txt")


def test_cli_bad_files_exit_4_naming_the_file(tmp_path):
    trunc = tmp_path / "all_reduce_perf.txt"
    lines = (B / "all_reduce_perf_h100_2node.txt").read_text().splitlines()
    trunc.write_text("\n".join(lines[:40] + [lines[40][:50]]) + "\n")  # the copy cut mid-row
    binary = tmp_path / "all_gather_perf.bin"
    binary.write_bytes(b"\x00\x01\x02 not text")
    latin = tmp_path / "broadcast_perf.txt"
    latin.write_bytes(b"# size count type\n\xe9\xff\n")
    foreign = tmp_path / "trace.json"
    foreign.write_text('{"traceEvents": [{"ph": "X", "name": "all_reduce_perf"}]}')
    for f, msg in ((trunc, "line 41: result row cut short"), (binary, "binary data"), (latin, "not UTF-8 text"),
                   (foreign, "no nccl-tests result table"),
                   (FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz", "binary data")):
        r = run_cli("baseline", f)
        assert r.returncode == 4, r.stderr
        assert r.stderr.count("\n") == 1 and str(f) in r.stderr and msg in r.stderr, r.stderr
    r = run_cli("baseline", tmp_path / "missing.txt")
    assert r.returncode == 3 and "no such file" in r.stderr
    r = run_cli("baseline", "--topo", B / "all_reduce_perf_h100_2node.txt")
    assert r.returncode == 4 and "not nvidia-smi topo -m output" in r.stderr


# ------------------------------------------------------------------ health and interpolation


def test_health_verdicts_by_hand():
    df = read_nccl_tests(B / "all_reduce_perf_h100_2node.txt")
    s = health_summary(df).row(0, named=True)
    # H100 SXM: 50 GB/s NIC per GPU × 8 GPUs per host = 400 (below the 450 NVLink line rate)
    assert (s["peak_busbw_gbps"], s["peak_size_bytes"], s["link_gbps"]) == (338.82, 8589934592, 400.0)
    assert math.isclose(s["ratio"], 338.82 / 400) and s["verdict"].startswith("healthy")
    h = rows(link_health(df)).filter(pl.col("size_bytes").is_in([2**25, 2**28, 2**27]))
    assert h["verdict"].str.slice(0, 9).to_list() == ["small mes", "far below", "below par"]  # 32 MiB, 128 MiB (0.38), 256 MiB (0.53)
    # the same test against a 200 Gb/s NIC: 8 × 25 = 200 GB/s, 338.82 / 200 = 1.69 -> above the ring bound
    s2 = health_summary(df, net_gbps=25).row(0, named=True)
    assert s2["link_gbps"] == 200.0 and s2["verdict"].startswith("above the link")
    assert link_gbps("H100 SXM", "all_reduce", "intra") == (450.0, "NVIDIA H100 SXM NVLink line rate 450 GB/s")
    assert link_gbps("H100 SXM", "all_to_all", "inter", 8, 2)[0] == 100.0  # NIC × N/(N−1), N = 2 nodes
    assert link_gbps("H100 SXM", "send_recv", "inter", 8, 2)[0] == 50.0
    assert link_gbps("A40", "all_reduce", "intra")[0] is None
    a2a = health_summary(read_nccl_tests(B / "alltoall_perf_h20_1node.txt")).row(0, named=True)
    assert a2a["link_gbps"] is None and "no link figure for NVIDIA H20-3e" in a2a["verdict"]
    lat = health_summary(read_nccl_tests(B / "broadcast_perf_v100_2node_2021.txt")).row(0, named=True)
    assert lat["verdict"].startswith("no message of 64 MiB")


def test_busbw_interpolated_in_log_size():
    df = read_nccl_tests(B / "all_reduce_perf_h100_2node.txt")
    at = busbw_at(df, "all_reduce", [100_000_000, 2**27, 4, 2**34], nranks=16)
    # 1e8 B lies between 64 MiB (99.74) and 128 MiB (152.32): 99.74 + 52.58 × (log2(1e8) − 26)
    want = 99.74 + (152.32 - 99.74) * (math.log2(1e8) - 26)
    assert math.isclose(at["baseline_gbps"][0], want, rel_tol=1e-12)
    assert at["baseline_gbps"][1] == 152.32
    assert at["baseline_gbps"][2:].to_list() == [0.0, 338.82] and at["extrapolated"].to_list() == [False, False, True, True]
    assert busbw_at(df, "broadcast", [1024])["baseline_gbps"].to_list() == [None]


# ------------------------------------------------------------------ topology


def test_topology_rtx4090_all_sys_with_nics():
    t = read_topology(B / "topo_rtx4090_8gpu.txt")
    assert t.gpus == [f"GPU{i}" for i in range(8)]
    assert t.gpu_links().group_by("link").len().rows() == [("SYS", 28)]
    d = {r["device"]: r for r in t.devices.iter_rows(named=True)}
    assert (d["GPU0"]["cpu_affinity"], d["GPU0"]["numa_affinity"], d["GPU4"]["numa_affinity"]) == ("0-55,112-167", 0, 1)
    assert d["GPU6"]["nearest_nic"] == "NIC0"  # PHB, the only non-SYS GPU–NIC path
    nic = t.links.filter((pl.col("a") == "NIC0") & (pl.col("b") == "NIC1")).row(0, named=True)
    assert (nic["link"], nic["path"], nic["rank"]) == ("PIX", "one PCIe switch", 1)


def test_topology_h100_nvlink_nic_affinity_and_tp_groups():
    t = read_topology(B / "topo_h100_nv18_8gpu.txt")
    g = t.gpu_links()
    assert g.height == 28 and g["link"].unique().to_list() == ["NV18"] and g["nvlinks"].unique().to_list() == [18]
    d = {r["device"]: r["nearest_nic"] for r in t.devices.iter_rows(named=True)}
    assert [d[f"GPU{i}"] for i in range(8)] == ["NIC8", "NIC7", "NIC6", "NIC5", "NIC4", "NIC3", "NIC2", "NIC1"]
    tp = tp_group_links(t, 8)
    assert tp.select("weakest", "non_nvlink_pairs", "all_nvlink").rows() == [("NV18", 0, True)]
    with pytest.raises(ConfigError, match="does not divide the 8 GPUs"):
        tp_group_links(t, 3)


def test_topology_pcie_box_and_legend_with_ansi():
    t = read_topology(B / "topo_5gpu_pcie.txt")
    pairs = {(r["a"], r["b"]): r["link"] for r in t.gpu_links().iter_rows(named=True)}
    assert pairs[("GPU1", "GPU2")] == "PHB" and pairs[("GPU3", "GPU4")] == "PHB" and pairs[("GPU0", "GPU3")] == "SYS"
    assert pairs[("GPU1", "GPU3")] == "NODE"
    tp = tp_group_links(read_topology(B / "topo_5gpu_pcie.txt"), 5)
    assert tp.select("weakest", "non_nvlink_pairs", "all_nvlink").rows() == [("SYS", 10, False)]
    one = read_topology(B / "topo_1gpu_3nic_legend.txt")
    assert one.devices.select("device", "name").rows() == [("GPU0", "GPU0"), ("NIC0", "mlx5_2"), ("NIC1", "mlx5_3"), ("NIC2", "mlx5_bond_0")]
    g0 = one.devices.row(0, named=True)
    assert (g0["cpu_affinity"], g0["numa_affinity"], g0["gpu_numa_id"], g0["nearest_nic"]) == ("16-31", 1, "N/A", "NIC0")


def test_cli_baseline_table_and_json(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli("baseline", B / "all_reduce_perf_h100_2node.txt", "--topo", B / "topo_h100_nv18_8gpu.txt", "-f", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    import orjson

    doc = orjson.loads(out.read_bytes())
    assert doc["nccl_tests"]["summary"][0]["peak_busbw_gbps"] == 338.82
    assert len(doc["topology"]["devices"]) == 17
    r = run_cli("baseline", B / "alltoall_perf_h20_1node.txt", "--gpu", "H100 SXM")
    assert r.returncode == 0 and "healthy" not in r.stdout  # 61.84 / 450 at 4 MiB: no message ≥ 64 MiB
    r = run_cli("baseline", B / "reduce_scatter_perf_2x4gpu.txt", "--scope", "sideways")
    assert r.returncode == 2 and "--scope" in r.stderr  # a usage error


def test_cli_tp_groups_from_a_run_config(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("[parallel]\ntp = 2\n")
    r = run_cli("baseline", "--topo", B / "topo_rtx4090_8gpu.txt", "-c", cfg)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("spans non-NVLink pairs") == 4  # GPU0-1, 2-3, 4-5, 6-7: all SYS
    cfg.write_text("[parallel]\ntp = 8\n")
    r = run_cli("baseline", "--topo", B / "topo_h100_nv18_8gpu.txt", "-c", cfg)
    assert r.returncode == 0 and "all pairs on NVLink" in r.stdout
    cfg.write_text("[parallel]\ntp = 3\n")
    r = run_cli("baseline", "--topo", B / "topo_h100_nv18_8gpu.txt", "-c", cfg)
    assert r.returncode == 7 and "does not divide the 8 GPUs" in r.stderr
