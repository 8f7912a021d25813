"""Named things that are missing are errors: a --step-range no range of the trace is called
(exit 4, the names the trace has listed, the closest first) and an output name whose extension
the command cannot write (exit 2), on real traces."""

from __future__ import annotations

import gzip

import orjson
import pytest

from conftest import DEMO, DLRM, TRACES, needs_shared, run_cli

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"


def _annotation_names(path) -> set[str]:
    """The host range names of a Kineto file, read from its JSON (``user_annotation``), ``#N`` cut."""
    import re

    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    return {re.sub(r"#\d+$", "", e["name"]) for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}


@needs_shared()
def test_a_step_range_the_trace_does_not_have_is_exit_4_with_the_names_it_has():
    r = run_cli("breakdown", SMALL, "--step-range", "ProfilerStp")
    assert r.returncode == 4 and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    names = _annotation_names(SMALL)
    assert names == {"ProfilerStep", "Optimizer.step#AdamW.step", "Optimizer.zero_grad#AdamW.zero_grad"}
    assert line.startswith("traceanalyzer: error: --step-range 'ProfilerStp' matches no range of rank 0 (its ranges: ")
    assert all(n in line for n in names) and "did you mean 'ProfilerStep'?" in line and len(line) <= 300
    # a name no range comes close to: listed, no guess
    r = run_cli("kernels", SMALL, "--step-range", "Nope")
    assert r.returncode == 4 and "matches no range" in r.stderr and "did you mean" not in r.stderr
    # the default name missing stays a warning: the whole trace is one step
    r = run_cli("breakdown", TRACES / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz", "-q")
    assert r.returncode == 0 and "the whole GPU span is analysed as one step" in r.stderr


def test_a_step_range_missing_on_every_rank_of_a_job_names_the_ranks_once():
    r = run_cli("breakdown", DLRM, "--step-range", "forward", "-q")
    assert r.returncode == 4
    [line] = r.stderr.strip().splitlines()
    assert "matches no range of ranks 0, 1, 2, 3, 4, 5, 6, 7 (their ranges: " in line and "'DistributedDataParallel.forward'" in line
    assert len(line) <= 300


@pytest.mark.parametrize("cmd,name,ok", [
    ("breakdown", "b.png", False), ("breakdown", "b.pdf", False), ("breakdown", "b.json.gz", False),
    ("report", "r.txt", False), ("kernels", "k.xlsx", False),
    ("breakdown", "b.txt", True), ("kernels", "k.txt", True), ("report", "r.2026-11-20", True),
])
def test_an_output_extension_is_honoured_or_refused(cmd, name, ok, tmp_path):
    out = tmp_path / name
    r = run_cli(cmd, DEMO, "-o", out, "-q")
    if not ok:
        assert r.returncode == 2 and not out.exists()
        [line] = r.stderr.strip().splitlines()
        assert f"{cmd} cannot write {out.suffix} files" in line
        return
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    if name.endswith(".txt"):  # the command's table, as on a terminal: text, not JSON or HTML
        assert not text.lstrip().startswith(("{", "<")) and ("Findings" in text or "kernel" in text.lower())
    else:  # no extension: the default format (a report: HTML)
        assert text.lstrip().lower().startswith("<!doctype html")


def test_a_txt_name_with_another_format_and_a_png_trend_with_json(tmp_path):
    r = run_cli("breakdown", DEMO, "-o", tmp_path / "b.txt", "-f", "json", "-q")
    assert r.returncode == 2 and "the name says table (.txt) but -f json was given" in r.stderr
    r = run_cli("trend", "--store", tmp_path, "-o", tmp_path / "t.png", "-f", "json")
    assert r.returncode == 2 and "plot" in r.stderr
