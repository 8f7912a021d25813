"""The user-facing docs: the README opens with the two commands that work, every relative link
and picture resolves inside the repository, and nothing points at a machine or at notes that
are not shipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHONPATH

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "fixtures" / "README.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _links(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(), flags=re.S)  # code blocks are not links
    return [m.group(1) for m in LINK.finditer(text)]


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(md):
    broken = []
    for target in _links(md):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        # lexically, not through symlinks: a link in the checkout is still the repository's own file
        path = Path(os.path.normpath(md.parent / target.split("#")[0]))
        if not path.exists() or ROOT not in path.parents:
            broken.append(target)
    assert broken == [], f"{md.name}: links to missing files or outside the repository: {broken}"


@pytest.mark.parametrize("md", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths_or_unshipped_notes(md):
    text = md.read_text()
    for bad in ("/work/", "/root/", "shared/reference", "peers.md", "kineto_format.md", "analytic_model.md"):
        assert bad not in text, f"{md.name} mentions {bad!r}"
    # our own tracker's numbers mean nothing to a user; public issues are cited as owner/repo issue #N
    for m in re.finditer(r"\b[Ii]ssue #?\d+", text):
        before = text[max(0, m.start() - 60) : m.start()]
        assert re.search(r"[\w.-]+/[\w.-]+\s*$", before), f"{md.name}: internal issue number {m.group(0)!r}"


def test_package_docstrings_cite_no_unshipped_notes():
    bad = [str(p.relative_to(ROOT)) for p in [*(ROOT / "src" / "traceanalyzer").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]
           if re.search(r"shared/reference|kineto_format\.md|analytic_model\.md|peers\.md", p.read_text())]
    assert bad == []


def test_readme_opens_with_the_two_commands_and_the_first_runs():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1).strip().splitlines()
    assert block == [
        "pip install . && traceanalyzer breakdown fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
        "pip install '.[test]' && python -m pytest",
    ]
    # the main job, without the install step (the package the tests import, the installed one)
    done = subprocess.run([sys.executable, "-m", "traceanalyzer", "breakdown",
                           "fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz"],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert done.returncode == 0, done.stderr
    # the numbers the README's picture shows: rank 0, 3 steps of 16.212 ms (their ProfilerStep ranges), 66.1 % exposed comm,
    # which are those of the independent plain-Python count of the same trace's steps
    # (tests/data/hta_reference.json, raw_steps of the MI300X trace)
    import json

    ref = json.loads((ROOT / "tests" / "data" / "hta_reference.json").read_text())["jobs"]
    [entry] = ref["kineto-public/tracelens-amd/mi300x_resnet_act_checkpoint_rank0.json.gz"]["per_file"].values()
    steps = entry["raw_steps"]["steps"]
    span = sum(st["span_ns"] for st in steps)
    assert (len(steps), f"{span / 3 / 1e6:.3f}", f"{100 * sum(st['exposed_comm_ns'] for st in steps) / span:.1f}") == (3, "16.212", "66.1")
    assert "mean of 3 steps" in done.stdout and re.search(r"│\s+0 │\s+16\.212 │", done.stdout)
    assert "66.1%" in done.stdout
    svg = (ROOT / "docs" / "img" / "breakdown.svg").read_text()
    assert "16.212" in svg and "66.1%" in svg


def test_guide_quotes_the_numbers_breakdown_prints():
    """docs/guide.md reads the 8-rank DLRM job: its quoted numbers are today's output."""
    done = subprocess.run([sys.executable, "-m", "traceanalyzer", "breakdown", "fixtures/kineto/dlrm-v100-8rank",
                           "--detail", "-f", "json"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import json

    doc = json.loads(done.stdout)
    guide = (ROOT / "docs" / "guide.md").read_text()
    step = doc["cross_rank"][0]
    assert step["slowest_rank"] == 1 and step["waited_on_rank"] == 7 and step["straggler_bucket"] == "exposed_comm"
    assert f"{step['max_us'] / 1e3:.3f}" == "19.901" and f"{step['median_us'] / 1e3:.3f}" == "16.126"
    # rank 1's step, rank 0's idle: the plain-Python counts of the raw JSON (tests/test_partition.py)
    sys.path.insert(0, str(ROOT / "tests"))
    from test_partition import _reference_for_single_step

    dlrm = ROOT / "fixtures" / "kineto" / "dlrm-v100-8rank"
    durs = [_reference_for_single_step(sorted(dlrm.glob(f"worker{r}_*"))[0])[1] for r in range(8)]
    assert max(durs) == durs[1] == 19_901_000
    assert (sorted(durs)[3] + sorted(durs)[4]) / 2 == 16_126_000  # the median of 8 ranks: 16.126 ms shown
    assert _reference_for_single_step(sorted(dlrm.glob("worker0_*"))[0])[0]["idle"] == 7_865_000
    r0 = doc["ranks"][0]["total"]
    assert (r0["idle_host_bound_us"], r0["idle_us"]) == (6440.0, 7865.0)
    assert [r0[f"idle_host_{c}_us"] for c in ("dataloader", "optimizer", "ops", "untraced")] == [1088.0, 301.0, 2905.0, 2146.0]
    for quoted in ("19.901 ms", "16.126", "+5.182 ms", "rank 7", "11.125 of its 11.336 ms", "6.440 of 7.865 ms",
                   "1.088 ms in the data loader, 0.301 ms in the optimizer, 2.905 ms in\nop dispatch and 2.146 ms untraced"):
        assert quoted in guide
