"""docs/tutorial.md runs: every ``python`` cell is executed in order in one namespace, as a
notebook would (the value of a cell's last expression is displayed), and where the tutorial
shows the output (a ``text`` block right after the cell) the numbers printed must be those. That
proves the tutorial current, not right (``--write`` copies the code's output into it): its key
tables are also checked against plain-Python counts of the raw JSON
(test_tutorial_breakdown_and_idle_equal_the_hand_count_of_the_raw_json).

    python tests/test_tutorial.py           # print every cell's output
    python tests/test_tutorial.py --write   # refresh the outputs shown in the tutorial
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")


def cells(text: str) -> list[tuple[str, str | None]]:
    """(code, shown output or None) for every python cell, in order."""
    blocks = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for i, (lang, body, _s, end) in enumerate(blocks):
        if lang != "python":
            continue
        shown = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "text" and not text[end : blocks[i + 1][2]].strip():
            shown = blocks[i + 1][1]
        out.append((body, shown))
    return out


def run_cell(code: str, ns: dict) -> str:
    """Run one cell as a notebook does: statements, then the last expression's repr."""
    tree = ast.parse(code)
    shows = tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";")  # ";": Jupyter shows nothing
    last = tree.body.pop() if shows else None
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
            if value is not None:
                print(repr(value))
    return buf.getvalue()


def numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in NUMBER.findall(text)]


#: the line of the first cell that says where the fixtures are (relative to the folder it runs in)
FIXTURES_LINE = 'fixtures = Path("fixtures")  # the checkout\'s fixtures/ folder'


def run_tutorial(workdir: Path) -> list[tuple[str, str | None, str]]:
    """Every cell run in ``workdir``, any folder (what it writes goes there), with the first
    cell's ``fixtures`` set as a user outside the checkout sets it, to the checkout's
    ``fixtures/``: (code, shown, printed)."""
    old = Path.cwd()
    os.chdir(workdir)
    try:
        ns: dict = {"__name__": "__tutorial__"}
        out = []
        for code, shown in cells(TUTORIAL.read_text(encoding="utf-8")):
            run = code.replace(FIXTURES_LINE, f"fixtures = Path({str(ROOT / 'fixtures')!r})")
            out.append((code, shown, run_cell(run, ns)))
        assert sum(FIXTURES_LINE in code for code, _s, _p in out) == 1, "the tutorial sets fixtures once, in its first cell"
        return out
    finally:
        os.chdir(old)


def test_tutorial_cells_run_and_print_what_it_shows(tmp_path):
    # from a folder of its own, outside the checkout: the cells import the installed package
    results = run_tutorial(tmp_path)
    assert len(results) >= 8
    checked = 0
    for code, shown, printed in results:
        if shown is None:
            continue
        want, got = numbers(shown), numbers(printed)
        assert len(want) == len(got) and all(math.isclose(w, g, rel_tol=1e-9, abs_tol=1e-12) for w, g in zip(want, got)), (
            f"cell:\n{code}\nshows:\n{shown}\nprinted:\n{printed}"
        )
        checked += 1
    assert checked >= 8
    # what the report cell wrote
    assert (tmp_path / "dlrm-report.html").stat().st_size > 10_000
    assert "### Stragglers" in (tmp_path / "dlrm-report.md").read_text()


def _shown_rows(code_start: str) -> list[list[float]]:
    """The numeric rows of the table the tutorial shows after the cell starting ``code_start``."""
    [shown] = [shown for code, shown in cells(TUTORIAL.read_text(encoding="utf-8")) if code.startswith(code_start)]
    return [numbers(line) for line in shown.splitlines() if line.startswith("│") and numbers(line)]


def test_tutorial_breakdown_and_idle_equal_the_hand_count_of_the_raw_json():
    """The tutorial's numbers are right, not only current: its breakdown and idle tables of the
    DLRM job against the plain-Python counts from the raw JSON of test_partition.py and
    test_idle.py (no package code in the counts)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_idle import hand_idle
    from test_partition import _reference_for_single_step

    from conftest import DLRM

    bd = _shown_rows("bd = ta.breakdown(a)")
    idle = _shown_rows('i = ta.idle(a, per="rank")')
    assert [r[0] for r in bd] == [r[0] for r in idle] == list(range(8))
    for rank in range(8):
        ref, dur = _reference_for_single_step(sorted(DLRM.glob(f"worker{rank}_*"))[0])
        ms = [round(x / 1e6, 3) for x in (dur, ref["compute"] + ref["recompute"], ref["exposed_comm"], ref["other"], ref["idle"])]
        assert bd[rank] == [rank, 10, *ms]
        causes = hand_idle(rank)
        want = [round(x / 1e6, 3) for x in (ref["idle"], causes["host_bound"], causes["sync"], causes["other"])]
        assert idle[rank][:5] == [rank, *want]
        assert idle[rank][5] == round(100 * ref["idle"] / dur, 1)


def test_tutorial_uses_no_machine_paths():
    text = TUTORIAL.read_text(encoding="utf-8")
    assert "/work/" not in text and "shared/traces" not in text


def write_outputs(text: str, printed: list[str]) -> str:
    """``text`` with the ``text`` block after each python cell replaced by what it printed."""
    outs = iter(printed)
    blocks = list(FENCE.finditer(text))
    pieces, pos = [], 0
    for i, m in enumerate(blocks):
        if m.group(1) != "python":
            continue
        out = next(outs)
        if i + 1 < len(blocks) and blocks[i + 1].group(1) == "text" and not text[m.end() : blocks[i + 1].start()].strip():
            nxt = blocks[i + 1]
            pieces += [text[pos : nxt.start()], "```text\n" + out.rstrip("\n") + "\n```"]
            pos = nxt.end()
    return "".join(pieces) + text[pos:]


if __name__ == "__main__":  # python tests/test_tutorial.py [--write]
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        results = run_tutorial(Path(d))
    if "--write" in sys.argv:
        TUTORIAL.write_text(write_outputs(TUTORIAL.read_text(encoding="utf-8"), [p for _c, _s, p in results]), encoding="utf-8")
    else:
        for code, _shown, printed in results:
            print(f"----- {code.strip().splitlines()[0]}\n{printed}")
