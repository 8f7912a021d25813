"""``traceanalyzer annotate``: valid Chrome-trace JSON, re-read by ``breakdown`` to the same
numbers, with tracks whose runs add up to the partition in the file's own time convention."""

from __future__ import annotations

import gzip
from collections import defaultdict

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import BUCKETS
from traceanalyzer.cli import main
from traceanalyzer.views.tracks import CATEGORY
from traceanalyzer.views.document import LABELS

from conftest import DEMO, DLRM, FIXTURES, TRACES, real_gpu_traces, run_cli

LABEL_TO_BUCKET = {LABELS[b]: b for b in BUCKETS}
KEY = ["rank", "step"]


def _ns(ts: float) -> int:
    """µs float -> ns the way Kineto's parser reads it (floor + rounded fraction)."""
    whole = int(ts // 1)
    return whole * 1000 + round((ts - whole) * 1000)


def _same_breakdown(a, b):
    da = ta.breakdown(ta.load(a)).sort(KEY)
    db = ta.breakdown(ta.load(b)).sort(KEY)
    assert da.equals(db), "annotated trace reads to different numbers"
    return da


def _load_doc(path):
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _check_tracks(doc, steps: pl.DataFrame, rank: int):
    """The added events: valid Chrome-trace records; run sums = the partition (ns)."""
    base = doc.get("baseTimeNanoseconds") or 0
    added = [e for e in doc["traceEvents"] if e.get("cat") == CATEGORY]
    assert added, "no tracks added"
    pids = {e["pid"] for e in added}
    assert len(pids) == 1 and isinstance(next(iter(pids)), int) and 0 < next(iter(pids)) < 2**31
    pid = next(iter(pids))
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("pid") == pid and e["name"] == "process_name"}
    assert names == {f"traceanalyzer rank {rank}"}
    sums = defaultdict(int)
    step_start = {}
    for e in added:
        assert e["ph"] == "X" and isinstance(e["ts"], float | int) and e["dur"] >= 0 and isinstance(e["name"], str)
        assert round(e["dur"], 3) == e["dur"] and round(e["ts"], 3) == e["ts"]  # µs, 3 decimals at most
        assert round(e["args"]["length_us"], 3) == e["args"]["length_us"] > 0
        if base:  # ns-exact timestamps: the slice is exactly the run
            assert e["dur"] == e["args"]["length_us"]
        else:  # epoch µs: float64 holds 0.25 µs steps, the viewer's slice is within that of the run
            assert abs(e["dur"] - e["args"]["length_us"]) <= 0.5
        if e["tid"] == 1:
            sums[(e["args"]["step"], LABEL_TO_BUCKET[e["name"]])] += round(e["args"]["length_us"] * 1000)
        else:
            step_start[e["args"]["step"]] = _ns(e["ts"]) + base
    # Perfetto reads ts/dur as llround(µs * 1000): adjacent runs on one thread must not overlap
    # there, or it drops the later one as improperly nested
    for tid in (1, 2):
        spans = sorted((round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in added if e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"overlapping slices on tid {tid}"
    mine = steps.filter(pl.col("rank") == rank)
    for row in mine.iter_rows(named=True):
        assert step_start[row["step"]] == row["start_ns"]  # written relative to baseTimeNanoseconds
        for b in BUCKETS:
            assert sums[(row["step"], b)] == row[f"{b}_ns"], (row["step"], b)


def test_annotate_single_file_round_trip(tmp_path):
    out = tmp_path / "annotated.json.gz"
    assert main(["annotate", str(DEMO), "-o", str(out)]) == 0
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    steps = _same_breakdown(DEMO, out)
    doc = _load_doc(out)
    orig = _load_doc(DEMO)
    assert doc["baseTimeNanoseconds"] == orig["baseTimeNanoseconds"] > 0
    # the original events are all there, unchanged and first
    assert doc["traceEvents"][: len(orig["traceEvents"])] == orig["traceEvents"]
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}
    _check_tracks(doc, steps, 0)


def test_annotate_directory_of_ranks_round_trip(tmp_path):
    out = tmp_path / "annotated"
    r = run_cli("annotate", DLRM, "-o", out)
    assert r.returncode == 0, r.stderr
    files = sorted(out.iterdir())
    assert [f.name for f in files] == sorted(f.name for f in DLRM.iterdir())
    steps = _same_breakdown(DLRM, out)
    for f in files:
        doc = _load_doc(f)
        assert "baseTimeNanoseconds" not in doc  # integer epoch µs: written back as such
        rank = doc["distributedInfo"]["rank"]
        _check_tracks(doc, steps, rank)


def test_annotate_plain_json_output_and_no_steps_trace(tmp_path):
    src = FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz"
    out = tmp_path / "annotated.json"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())  # plain JSON, not gzip
    steps = _same_breakdown(src, out)
    _check_tracks(doc, steps, 0)


def test_annotate_refuses_to_overwrite_inputs_and_bad_input(tmp_path, capsys):
    assert main(["annotate", str(DLRM), "-o", str(DLRM)]) != 0
    assert "refusing to overwrite" in capsys.readouterr().err
    assert main(["annotate", str(FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz"), "-o", str(tmp_path / "x.json")]) == 5


@pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")
@pytest.mark.parametrize(
    "name", ["b200_eager_trace_rank0.json.gz", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "triton_example.json.gz"]
)
def test_annotate_round_trip_on_shared_traces(tmp_path, name):
    src = next(p for p in real_gpu_traces() if p.name == name)
    out = tmp_path / "a.json.gz"
    assert main(["annotate", str(src), "-o", str(out)]) == 0
    steps = _same_breakdown(src, out)
    _check_tracks(_load_doc(out), steps, int(steps["rank"][0]))


# --- --merge, Nsight Systems input, -o semantics ---------------------------------------------------

def _rank_sums(doc: dict, pid: int) -> dict:
    """(step, bucket) -> ns of the classification track of process ``pid``."""
    sums = defaultdict(int)
    for e in doc["traceEvents"]:
        if e.get("cat") == CATEGORY and e["pid"] == pid and e["tid"] == 1:
            sums[(e["args"]["step"], LABEL_TO_BUCKET[e["name"]])] += round(e["args"]["length_us"] * 1000)
    return sums


def _check_rebuilt(doc: dict, src, ranks: list[int]):
    """One process per rank, named after it; every parsed event of the rank in its process at
    its exact nanosecond; the classification tracks sum to the partition."""
    trace = ta.load(src)
    steps = ta.breakdown(trace)
    base = doc["baseTimeNanoseconds"]
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs) == [r + 1 for r in ranks] and all(procs[r + 1].startswith(f"rank {r}") for r in ranks)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in doc["traceEvents"])
    for r in ranks:
        mine = trace.events.filter(pl.col("rank") == r, pl.col("start_ns").is_not_null())
        got = sorted(_ns(e["ts"]) + base for e in doc["traceEvents"]
                     if e["ph"] == "X" and e["pid"] == r + 1 and e["cat"] != CATEGORY)
        assert got == sorted(mine["start_ns"].to_list())  # every event, at its exact ns
        kernels = sorted((_ns(e["ts"]) + base, e["name"]) for e in doc["traceEvents"]
                         if e["ph"] == "X" and e["pid"] == r + 1 and e["cat"] == "kernel")
        want = mine.filter(pl.col("kind") == "kernel").sort("start_ns", "name")
        assert kernels == list(zip(want["start_ns"].to_list(), want["name"].to_list()))
        sums = _rank_sums(doc, r + 1)
        for row in steps.filter(pl.col("rank") == r).iter_rows(named=True):
            for b in BUCKETS:
                assert sums[(row["step"], b)] == row[f"{b}_ns"], (r, row["step"], b)
        # the classification threads come first in the process, then the GPU streams
        names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == r + 1}
        assert names[1].startswith("buckets") and names[2].startswith("steps")
        assert any(n.startswith("GPU ") for n in names.values())


def test_annotate_merge_writes_one_multi_rank_trace(tmp_path):
    out = tmp_path / "merged.json.gz"
    r = run_cli("annotate", DLRM, "--merge", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    doc = _load_doc(out)
    _check_rebuilt(doc, DLRM, list(range(8)))
    # an existing directory: merged.json.gz inside it
    d = tmp_path / "d"
    d.mkdir()
    assert main(["annotate", str(DLRM), "--merge", "-o", str(d), "-q"]) == 0
    assert [p.name for p in d.iterdir()] == ["merged.json.gz"]


def test_annotate_accepts_nsys_input(tmp_path):
    src = FIXTURES / "nsys" / "mfu_2gpu_before_cut.sqlite"  # one export, two ranks
    out = tmp_path / "nsys.json"
    r = run_cli("annotate", src, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    _check_rebuilt(orjson.loads(out.read_bytes()), src, [0, 1])
    # into a directory: named after the export, as Chrome-trace JSON
    r = run_cli("annotate", src, "-o", tmp_path / "dir", "-q")
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "dir").iterdir()] == ["mfu_2gpu_before_cut.json.gz"]


def test_annotate_output_names_a_file_or_a_directory(tmp_path, capsys):
    # several rank files and a file name: refused before any work, nothing created
    out = tmp_path / "x.json.gz"
    assert main(["annotate", str(DLRM), "-o", str(out), "-q"]) == 3
    assert "--merge" in capsys.readouterr().err and not out.exists()
    # --merge with a directory-like name that does not exist: refused, nothing created
    out = tmp_path / "merged"
    assert main(["annotate", str(DLRM), "--merge", "-o", str(out), "-q"]) == 3
    assert "NAME.json" in capsys.readouterr().err and not out.exists()
    # one rank file and a name without .json: a directory holding the trace under its own name
    out = tmp_path / "annotated"
    assert main(["annotate", str(DEMO), "-o", str(out), "-q"]) == 0
    assert [p.name for p in out.iterdir()] == [DEMO.name]
    # never an input: the input itself as -o, merged or not
    src = tmp_path / "in.json.gz"
    src.write_bytes(DEMO.read_bytes())
    for extra in ([], ["--merge"]):
        assert main(["annotate", str(src), "-o", str(src), "-q", *extra]) == 3
        assert "refusing to overwrite" in capsys.readouterr().err
    assert src.read_bytes() == DEMO.read_bytes()
