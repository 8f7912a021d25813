"""One vocabulary across the commands, on real traces: one unit per table column, one value for
host time per launched item wherever it is shown, kernel names that stay distinct when cut,
ops by GPU time, idle causes as a tree, the report's headline = finding 1, no ``-0.0``."""

from __future__ import annotations

import re

import orjson
import pytest

from conftest import DEMO, DLRM, ROOT, TRACES, needs_shared, run_cli
from traceanalyzer.render import units
from traceanalyzer.render.names import shorten

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"
CFG = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"


def _rows(text: str) -> list[list[str]]:
    """The cells of a rich table printed as text (rows between │ bars)."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def test_the_formatter_picks_one_unit_per_column_and_never_minus_zero():
    assert units.column([3.24e6, 29.2e3, 20.9e3, None]) == ("ms", ["3.240", "0.029", "0.021", "-"])
    assert units.column([30_949, 812]) == ("µs", ["30.95", "0.81"])
    assert [units.duration(v) for v in (812, 30_949, 999_996, 12_345_678, 1.2e9)] == ["812 ns", "30.9 µs", "1.00 ms", "12.3 ms", "1.20 s"]
    assert units.fixed(-0.00004, 1) == "0.0" and units.signed(-0.0004, 3) == "0.000" and units.signed(-1234.5, 1) == "-1,234.5"


@needs_shared()
def test_kernels_table_has_one_unit_per_time_column_matching_the_json():
    r = run_cli("kernels", SMALL, "--top", "20")
    assert r.returncode == 0, r.stderr
    head = next(line for line in r.stdout.splitlines() if line.startswith("┃") and "kernel" in line)
    heads = [c.strip() for c in head.strip("┃").split("┃")]
    assert heads[4:9] == ["total ms", "mean µs", "p50 µs", "p99 µs", "bucket time ms"]
    doc = orjson.loads(run_cli("kernels", SMALL, "-f", "json", "--top", "20").stdout)
    rows = [row for row in _rows(r.stdout) if row[3]]  # the first line of each row (names fold)
    assert len(rows) == 20
    for row, ref in zip(rows, doc["rows"], strict=True):
        assert not any(u in " ".join(row[4:9]) for u in ("us", "ms", "ns", "µs"))  # the unit is in the heading only
        assert row[4] == f"{ref['total_ns'] / 1e6:.3f}" and float(row[5]) == pytest.approx(ref["mean_ns"] / 1e3, abs=0.051)


def test_host_time_per_launched_item_is_one_value_in_every_command():
    """DLRM (8 ranks, one step each): the finding's host time per launched item, without the
    profiler's own host work, summed by hand from the launches table over the CPU-bound
    rank-steps; the same value in breakdown's finding and the report's, and the launches table
    shows each step's value in µs (it said 0.030 ms where the finding said 31.0 µs)."""
    doc = orjson.loads(run_cli("launches", DLRM, "-f", "json", "-q").stdout)
    bound = [s for s in doc["steps"] if s["cpu_bound"]]
    assert 0 < len(bound) < len(doc["steps"])
    host = sum(max(s["host_ns"] - s["profiler_host_ns"], 0) for s in bound) // sum(s["launched"] for s in bound) / 1e3
    gpu = sum(s["duration_ns"] - s["idle_ns"] for s in bound) // sum(s["launched"] for s in bound) / 1e3
    said = f"{host:.1f} µs of host time per launched item (dispatch + launch) against {gpu:.1f} µs of GPU time"
    detail = " ".join(run_cli("breakdown", DLRM, "--detail", "-q").stdout.split())  # wrapped on a pipe
    assert said in detail
    report = orjson.loads(run_cli("report", DLRM, "-f", "json", "-q").stdout)
    assert any(said in f["cause"] for f in report["findings"])
    from rich.console import Console

    import polars as pl
    from traceanalyzer.render.frames import table

    console = Console(width=400, record=True)
    console.print(table(pl.DataFrame({"host_per_item_ns": [s["host_ns_per_kernel"] for s in doc["steps"]]}), "t"))
    text = console.export_text()
    assert "host_per_item µs" in text
    assert [row[0] for row in _rows(text)] == [units.fixed(s["host_ns_per_kernel"] / 1e3, 2) for s in doc["steps"]]


@needs_shared()
def test_cut_kernel_names_stay_distinct_on_a_real_trace():
    doc = orjson.loads(run_cli("kernels", SMALL, "-f", "json").stdout)
    names = sorted({r["name"] for r in doc["rows"]})
    for width in (50, 60, 70):
        cut = shorten(names, width)
        assert len(set(cut)) == len(names) and all(len(c) <= width for c in cut), width
        plain = {n[: width - 1] for n in names}
        assert len(plain) < len(names)  # a plain cut would merge some: the test can fail
    assert shorten(["x" * 80, "x" * 80], 70)[0] == shorten(["x" * 80], 70)[0]  # the same name stays the same


def test_ops_are_sorted_by_gpu_time_by_default():
    doc = orjson.loads(run_cli("ops", DEMO, "-f", "json", "-q").stdout)
    gpu = [r["gpu_ns"] for r in doc["rows"]]
    assert gpu == sorted(gpu, reverse=True) and gpu[0] > 0
    assert doc["sort"] == "gpu"


def test_idle_causes_are_a_tree_whose_children_sum_to_their_parent():
    out = run_cli("breakdown", DLRM, "--detail", "-q").stdout
    block = out[out.index("Idle by cause"):]
    rows = _rows(block)[:9]  # rank 0: idle, 4 causes, host-bound's 4
    assert [r[1] for r in rows] == ["idle", "host-bound", "data loader", "optimizer", "ops", "untraced", "sync wait", "PP bubble", "other"]
    depth = {r[1]: len(r[1]) for r in rows}
    lines = [line for line in block.splitlines() if line.startswith("│")][:9]
    assert "│   host-bound" in lines[1] and "│     data loader" in lines[2] and "│   sync wait" in lines[6]
    ms = {r[1]: float(r[2]) for r in rows}
    assert ms["host-bound"] + ms["sync wait"] + ms["PP bubble"] + ms["other"] == pytest.approx(ms["idle"], abs=0.003)
    assert sum(ms[k] for k in ("data loader", "optimizer", "ops", "untraced")) == pytest.approx(ms["host-bound"], abs=0.003)
    assert all(r[4] == "host-bound" for r in rows[2:6]) and depth


def test_report_headline_is_finding_1_and_no_table_reads_minus_zero(tmp_path):
    md = tmp_path / "r.md"
    assert run_cli("report", DLRM, "-o", md, "-q").returncode == 0
    doc = orjson.loads(run_cli("report", DLRM, "-f", "json", "-q").stdout)
    first = doc["findings"][0]
    assert f"biggest loss (finding 1): {first['label']} (ms per step) | {first['ms_per_step']:.3f} |" in md.read_text()
    for args in (["reconcile", DEMO, "-c", CFG], ["compare", DEMO, DEMO, "-c", CFG], ["whatif", "-c", CFG, "--trace", DEMO, "--set", "tp=1"]):
        r = run_cli(*args, "-q")
        if r.returncode == 2 and "No such option" in r.stderr:  # whatif's spelling may differ: tested where it runs
            continue
        assert r.returncode == 0, (args, r.stderr)
        assert not re.search(r"(?<![\w.])-0\.0+(?!\d*[1-9])\b", r.stdout), args
