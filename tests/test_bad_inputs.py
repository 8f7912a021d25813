"""Every bad input gets a clear answer: the corpus from scripts/make_bad_corpus.py, run through
the CLI (``breakdown FILE -f json``) in-process, plus a sample as a subprocess.

For every entry of the manifest: no Python traceback, the documented exit code the manifest
expects; errors are exactly one stderr line naming the file and the problem; recoverable inputs
succeed with a warning that counts what was dropped (the count is computed by the generator from
the source bytes, not by the parser); inputs whose damage must not change the answer (reordered,
duplicated, injected junk events) give exactly the original trace's breakdown.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson
import pytest

from traceanalyzer.cli import main
from traceanalyzer.errors import EXIT_CODES

from conftest import ROOT, run_cli, run_unprivileged, write_bad_corpus

CASES = [
    "truncated", "truncated-gzip", "truncated-compact", "corrupt-gzip", "not-json", "not-a-trace",
    "empty-events", "missing-field", "wrong-type", "negative-nan", "out-of-order", "duplicates",
    "absurd-ts", "unknown-category", "skewed-clocks", "mixed-jobs", "sqlite-schema",
    "sqlite-missing-tables", "zero-byte", "unreadable", "nsys-rep", "empty-dir",
    "odd-metadata", "markup", "duplicate-steps", "nsys-negative", "long-name",
    # odd but valid Kineto inputs, and hostile ones
    "gzip-members", "phase-variants", "duplicate-keys", "gzip-bomb",
]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("bad_corpus")
    return out, write_bad_corpus(out)["entries"]


_ORIGINALS: dict[str, dict] = {}


def _run(path: Path, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["breakdown", str(path), "-f", "json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _original(rel: str, capsys) -> dict:
    if rel not in _ORIGINALS:
        rc, out, err = _run(ROOT / rel, capsys)
        assert rc == 0, err
        _ORIGINALS[rel] = orjson.loads(out)
    return _ORIGINALS[rel]


def _ns(d: dict) -> dict:
    """µs values back to integer ns (the *_us floats are ns / 1000 up to an ulp)."""
    return {k: round(v * 1000) if k.endswith("_us") else v for k, v in d.items()}


def _numbers(doc: dict) -> list:
    return [(r["rank"], [_ns(s) for s in r["steps"]], _ns(r["total"])) for r in doc["ranks"]]


def check_entry(root: Path, rel: str, exp: dict, capsys, result: tuple[int, str, str] | None = None) -> list[str]:
    """Problems with one corpus entry (empty when it behaves as the manifest says); ``result``:
    ``(exit code, stdout, stderr)`` of a run made elsewhere, instead of one in this process."""
    path = root / rel
    rc, out, err = result or _run(path, capsys)
    problems = []
    where = f"{rel}: rc={rc} stderr={err.strip()[:400]!r}"
    if "Traceback" in err or "internal error" in err:
        return [f"{where}: traceback / internal error"]
    if rc not in EXIT_CODES:
        problems.append(f"{where}: exit code {rc} is not documented")
    allowed = exp["exit"] if isinstance(exp["exit"], list) else [exp["exit"]]
    if rc not in allowed:
        return [*problems, f"{where}: expected exit {exp['exit']}"]
    if exp["expect"] == "error":
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if len(lines) != 1:
            problems.append(f"{where}: {len(lines)} stderr lines, want exactly 1")
        line = lines[0] if lines else ""
        if not line.startswith("traceanalyzer: error: "):
            problems.append(f"{where}: not an error line")
        if os.path.isdir(path):  # the message names a file of the directory, or the directory
            names = [p.name for p in path.iterdir()] + [path.name]
            named = [n for n in names if n in line]
            want = 2 if exp["case"] == "mixed-jobs" else 1
            if len(named) < want:
                problems.append(f"{where}: names {named}, want {want} of {names}")
        elif str(path) not in line:
            problems.append(f"{where}: does not name the file")
        alts = exp["message"] if isinstance(exp["message"], list) else [exp["message"]]
        if not any(a in line for a in alts):
            problems.append(f"{where}: none of {alts} in the message")
        if out:
            problems.append(f"{where}: printed a result on error")
        return problems
    doc = orjson.loads(out)
    warnings = doc["warnings"]
    if exp["expect"] == "recover":
        for check in [exp, *exp.get("checks", [])]:
            hits = [w for w in warnings if check["warning"] in w]
            if not hits:
                problems.append(f"{where}: no warning with {check['warning']!r} in {warnings}")
            elif check["warning"] not in err:
                problems.append(f"{where}: warning not on stderr")
            if "count" in check and hits:
                counted = [int(x) for w in hits for x in re.findall(r"(?<![\d.])(\d+)(?![\d.%])", w.split(": ", 1)[-1])]
                if check["count"] not in counted:
                    problems.append(f"{where}: warning {hits} does not count {check['count']}")
        if "skew" in exp and hits:  # rank N S s ahead|behind: the DLRM ranks differ by ms already
            named = re.findall(r"rank (\d+) ([\d.]+) s (?:ahead|behind)", hits[0])
            sk = exp["skew"]
            if not any(int(r) in sk["ranks"] and abs(float(v) - sk["seconds"]) < 0.05 for r, v in named):
                problems.append(f"{where}: skew {named} is not {sk}")
    elif exp["expect"] == "ok":
        own = [w for w in warnings if str(path) in w]
        if own:
            problems.append(f"{where}: unexpected warnings {own}")
    if exp.get("same_as"):
        if _numbers(doc) != _numbers(_original(exp["same_as"], capsys)):
            problems.append(f"{where}: breakdown differs from {exp['same_as']}")
    if not doc["ranks"] or not doc["ranks"][0]["steps"]:
        problems.append(f"{where}: success without a result")
    return problems


def _digest(root: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and os.access(p, os.R_OK)
    }


def test_corpus_is_big_deterministic_and_covers_every_case(corpus, tmp_path):
    root, entries = corpus
    assert len(entries) >= 200
    cases = {e["case"] for e in entries.values()}
    assert cases == set(CASES), cases ^ set(CASES)
    assert all(os.path.lexists(root / rel) for rel, e in entries.items() if e["case"] != "long-name")
    assert {e["expect"] for e in entries.values()} == {"error", "recover", "ok"}
    # deterministic: the same seed gives the same bytes
    write_bad_corpus(tmp_path / "again")
    assert _digest(tmp_path / "again") == _digest(root)


@pytest.mark.parametrize("case", CASES)
def test_every_corpus_entry_gets_a_clear_answer(corpus, case, capsys):
    root, entries = corpus
    mine = {rel: e for rel, e in sorted(entries.items()) if e["case"] == case}
    assert mine, f"no corpus entry for {case}"
    problems = []
    for rel, exp in mine.items():
        result = None
        if exp.get("skip_if_readable") and os.access(root / rel, os.R_OK):
            # root reads a chmod 000 file: run the command where file modes bind
            r = run_unprivileged(["-m", "traceanalyzer", "breakdown", str(root / rel), "-f", "json"])
            result = (r.returncode, r.stdout, r.stderr)
        problems += check_entry(root, rel, exp, capsys, result)
    assert not problems, "\n".join(problems)


def test_a_sample_as_a_real_subprocess(corpus):
    """The in-process answers are what a user sees: one entry per outcome, run as a subprocess."""
    root, entries = corpus
    picks = {}
    for rel, e in sorted(entries.items()):
        if e.get("skip_if_readable"):
            continue
        if isinstance(e["exit"], int):
            picks.setdefault((e["expect"], e["exit"]), rel)
    for (expect, code), rel in sorted(picks.items()):
        r = run_cli("breakdown", root / rel, "-f", "json")
        assert r.returncode == code, (rel, r.stderr)
        assert "Traceback" not in r.stderr
        if expect == "error":
            assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == "", (rel, r.stderr)
        else:
            assert orjson.loads(r.stdout)["schema_version"] == 1


def test_a_truncated_modern_trace_keeps_its_complete_steps_exactly(tmp_path, capsys):
    """The MI300X demo (host events first, GPU events last, 3 steps) cut at 99 %: the GPU records
    of the last step's launches are lost. That step is dropped, not undercounted; the steps before
    it are exactly the full trace's (the kept step's own GPU work is complete)."""
    import gzip

    from conftest import DEMO

    raw = gzip.decompress(DEMO.read_bytes())
    cut = tmp_path / "rank0.json"
    cut.write_bytes(raw[: int(len(raw) * 0.99)])
    rc, out, err = _run(cut, capsys)
    assert rc == 0, err
    doc = orjson.loads(out)
    full = _original(str(DEMO.relative_to(ROOT)), capsys)
    got = {s["step"]: _ns(s) for s in doc["ranks"][0]["steps"]}
    want = {s["step"]: _ns(s) for s in full["ranks"][0]["steps"]}
    assert sorted(want) == [15, 16, 17] and sorted(got) == [15, 16]
    # the cut also lost the trailing baseTimeNanoseconds: times are on the trace's own clock
    assert got[15]["start_us"] != want[15]["start_us"]
    # the partition of a kept step is exact; its idle *causes* need host runtime records (sync
    # calls), which Kineto writes among the GPU records, so they may be cut: a warning says so
    same = lambda d: {k: v for k, v in d.items() if k not in ("start_us", "start_ns") and not (k.startswith("idle_") and k != "idle_us")}  # noqa: E731
    assert same(got[15]) == same(want[15])
    assert any("idle split" in w and "truncated" in w for w in doc["warnings"])
    # the last kept step ends at its own last GPU activity instead of step 17's first
    for k in ("compute_us", "recompute_us", "exposed_comm_us", "overlapped_comm_us"):
        assert got[16][k] == want[16][k], k
    assert any("kernel launches were cut off" in w and "dropped 1 incomplete steps" in w for w in doc["warnings"])
