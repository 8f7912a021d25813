"""Remedies that fit the run, on real traces, against what the raw JSON says (read here by hand) and
the runs' ``truth.json``: no finding recommends what the run already does (CUDA graphs, compile,
less recompute to a run without it); waiting at a collective names the late rank, never "overlap";
the sync remedy names the sync calls found; the recompute remedy fits the model; a GPU-only
capture's idle has an unknown cause."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from traceanalyzer.engine import analyse
from traceanalyzer.engine.rank import Options
from traceanalyzer.reconciliation.findings import findings

from conftest import ROOT, TRACES, real_gpu_traces, run_cli

FIX = ROOT / "fixtures" / "kineto"
DLRM = FIX / "dlrm-v100-8rank"
H200 = TRACES / "h200"
h200 = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _found(path: Path, **kw):
    an = analyse([path], Options(tables=frozenset({"trace_facts", "launches"})), workers=1, quiet=True)
    return findings(an, **kw), an


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _names(path: Path) -> list[str]:
    """Every timed event's name: the Kineto JSON's complete events, or an Nsight Systems export's
    runtime calls, kernels and NVTX ranges (SQLite, through its string table)."""
    if path.suffix == ".sqlite":
        import sqlite3

        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        out = []
        for t, col in (("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName")):
            if t in tables:
                out += [r[0] for r in con.execute(f"select s.value from {t} k join StringIds s on s.id = k.{col}")]
        if "NVTX_EVENTS" in tables:
            out += [r[0] or "" for r in con.execute("select text from NVTX_EVENTS")]
        con.close()
        return [str(n) for n in out]
    return [str(e.get("name", "")) for e in _events(path) if e.get("ph") == "X"]


def _hand(path: Path) -> dict:
    """What the run applies, from the raw file: graph launches, compiled regions, attention / conv ops."""
    names = _names(path)
    return {"graphs": sum(n.endswith("GraphLaunch") for n in names),
            "compiled": sum(n.startswith(("CompiledFunction", "Torch-Compiled Region", "## Call CompiledFxGraph")) for n in names),
            "attention": sum("scaled_dot_product" in n or "attention" in n.lower() for n in names),
            "conv": sum(n.startswith("aten::conv") for n in names)}


def _all_traces() -> list:
    h = sorted(H200.glob("*/rank0.pt.trace.json.gz")) if H200.exists() else []
    bundled = sorted(p for p in FIX.glob("*.json.gz") if "cpu_only" not in p.name) + sorted((ROOT / "fixtures" / "nsys").glob("*.sqlite"))
    nsys = sorted((TRACES / "nsys").glob("*.sqlite")) if TRACES.exists() else []
    shared = [p for p in real_gpu_traces() if isinstance(p, Path) and "cupti_profiler" not in str(p)]
    return [pytest.param(p, id=p.parent.name + "/" + p.name[:30]) for p in [*h, *shared, *nsys, *bundled]]


@pytest.mark.parametrize("path", _all_traces())
def test_no_finding_recommends_what_the_run_already_does(path):
    hand = _hand(path)
    found, an = _found(path)
    truth = path.parent / "truth.json"
    cfg = json.loads(truth.read_text())["config"] if truth.exists() else {}
    compiled = bool(cfg.get("compile")) or hand["compiled"] > 0
    recompute = bool(cfg.get("recompute")) if cfg else int(an.steps["recompute_ns"].sum()) > 0
    for f in found:
        r = f["remedy"]
        if hand["graphs"]:
            assert "CUDA graphs or" not in r and not r.startswith("CUDA graphs:"), (path, r)
        if compiled:
            assert "or torch.compile(" not in r, (path, r)
        if not recompute:
            assert f["loss"] != "recompute", (path, f)
    if cfg:  # the run's own record of what it applies, beside ours
        assert (int(an.extras["trace_facts"]["compiled_regions"].sum()) > 0) is bool(cfg.get("compile"))


def _nccl(path: Path) -> list[tuple[float, float]]:
    ks = [e for e in _events(path) if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in ks)


def test_dlrm_top_finding_names_the_late_rank_and_the_wait():
    """By hand from the raw JSON: the i-th NCCL kernel of every rank is one collective; the rank
    that starts it last is the one the others wait for; a rank's wait is its kernel time before
    that last start."""
    files = {int(f.name[len("worker"):].split("_")[0]): f for f in DLRM.glob("worker*")}
    ks = {r: _nccl(f) for r, f in files.items()}
    n = len(ks[0])
    assert all(len(v) == n for v in ks.values()) and n == 8
    last = [max(ks, key=lambda r: ks[r][i][0]) for i in range(n)]
    late = max(set(last), key=last.count)
    starts = [max(ks[r][i][0] for r in ks) for i in range(n)]
    wait0 = sum(min(starts[i], e) - s for i, (s, e) in enumerate(ks[0])) / 1e3  # ms
    kernel0 = sum(e - s for s, e in ks[0]) / 1e3
    assert late == 7 and last.count(7) == 5
    assert round(kernel0, 2) == 5.80 and round(wait0, 2) == 5.58
    found, _ = _found(DLRM)
    top = found[0]
    assert top["loss"] == "exposed_comm_dp" and "rank 7" in top["label"] and "all_to_all" in top["label"]
    assert "wait" in top["cause"] and "rank 7 arrived last at 5 of 8" in top["cause"]
    assert top["remedy"].startswith("look at what rank 7 does before") and "overlap the gradient" not in top["remedy"]
    assert "world (dimension unknown)" in top["label"]  # the job's one group spans the world: no dimension shown
    detail = run_cli("breakdown", DLRM, "--detail", "-q").stdout
    assert "default (world: dimension unknown)" in detail and "(DP)" not in detail


@h200
def test_the_sync_remedy_names_the_sync_calls_found():
    b4 = H200 / "b4" / "rank0.pt.trace.json.gz"
    syncs = [e for e in _events(b4) if e.get("name") == "cudaDeviceSynchronize"]
    found, _ = _found(b4)
    f = next(f for f in found if f["loss"] == "idle_sync")
    assert f"cudaDeviceSynchronize ({len(syncs)} calls" in f["cause"] and len(syncs) == 5
    assert "cudaDeviceSynchronize" in f["remedy"] and ".item()" not in f["remedy"]


@h200
def test_the_recompute_remedy_fits_the_model():
    resnet = FIX / "mi300x_resnet_act_checkpoint_rank0.json.gz"
    hand = _hand(resnet)
    assert hand["conv"] > 0 and hand["attention"] == 0  # a ResNet
    f = next(f for f in _found(resnet)[0] if f["loss"] == "recompute")
    assert "attention" not in f["remedy"]
    gpt = H200 / "recompute" / "rank0.pt.trace.json.gz"
    assert _hand(gpt)["attention"] > 0  # SDPA: a transformer
    g = next(f for f in _found(gpt)[0] if f["loss"] == "recompute")
    assert g["remedy"].startswith("selective recompute (attention only)")


def test_a_gpu_only_capture_does_not_blame_python(tmp_path):
    doc = json.loads(gzip.decompress((FIX / "a100_alexnet_nosteps.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") == "M"]
    path = tmp_path / "gpu_only.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    found, _ = _found(path)
    assert found and all("Python" not in f["cause"] for f in found)
    assert "unknown" in found[0]["label"] and "no host events" in found[0]["cause"]


@pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")
def test_no_findings_says_the_threshold_is_per_cause():
    """The vLLM graph replay has idle of several causes, none of 1 % of the step on its own."""
    res = run_cli("breakdown", TRACES / "kineto-public" / "tracelens-amd" / "vllm_piecewise_graph_execution.json.gz", "-q")
    assert res.returncode == 0 and "Findings: no single loss of 1% of the step or more" in res.stdout
    assert "the threshold is per cause" in res.stdout
