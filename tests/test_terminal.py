"""Terminal output as a person reads it, checked on the real output of every command that prints a
table: every line fits 80 columns (``COLUMNS=80``) with no header, number or word cut short; no
line ends in a space when the output is a pipe; rows that are zero only with ``--all``; warnings
only about what the view shows; one metavar vocabulary and one wording of ``-o`` / ``-f``."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
import typer
from rich.table import Table

from conftest import DEMO, DLRM, FIXTURES, PYTHONPATH, ROOT
from traceanalyzer.cli import app
from traceanalyzer.commands.common import FORMAT_HELP, OUTPUT_HELP, param_kind
from traceanalyzer.render.console import NoTrailingSpaces, fit_table, out_console

DEMO_TOML = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
BLOOM = ROOT / "docs" / "examples" / "bloom-176b.toml"
BASELINES = FIXTURES / "baselines"

#: a 1.4 B GPT on one H200 (no [reported] throughput: without a trace the anchor is the analytic model)
GPT_TOML = """name = "GPT 1.4B, 1 x H200"
[model]
layers = 24
hidden = 2048
heads = 16
vocab = 50304
seq_length = 2048
[batch]
global_batch = 8
micro_batch = 8
[hardware]
gpu = "NVIDIA H200"
num_gpus = 1
precision = "bf16"
"""


def cli(*args, columns: int | None = 80, cwd=ROOT) -> subprocess.CompletedProcess:
    """The CLI as a user runs it with its output piped (stdout is not a terminal)."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def gpt_toml(tmp_path_factory):
    p = tmp_path_factory.mktemp("cfg") / "gpt.toml"
    p.write_text(GPT_TOML)
    return p


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    st = tmp_path_factory.mktemp("store") / "store"
    done = cli("batch", DLRM, DEMO, "--store", st, "-q")
    assert done.returncode == 0, done.stderr
    return st


#: every command that prints a table, on the bundled fixtures
TABLES = {
    "breakdown": lambda c: ["breakdown", DEMO],
    "breakdown --detail": lambda c: ["breakdown", "--detail", DLRM],
    "breakdown --ranks summary": lambda c: ["breakdown", "--detail", "--ranks", "summary", DLRM],
    "kernels": lambda c: ["kernels", DEMO],
    "ops": lambda c: ["ops", DEMO],
    "reconcile": lambda c: ["reconcile", DEMO, "-c", DEMO_TOML, "--all"],
    "compare": lambda c: ["compare", DEMO, DEMO, "-c", DEMO_TOML, "--all"],
    "compare (time)": lambda c: ["compare", DLRM, DEMO, "--all"],
    "predict": lambda c: ["predict", "-c", BLOOM],
    "whatif": lambda c: ["whatif", "-c", c["gpt"], "--set", "micro_batch=4"],
    "whatif --search": lambda c: ["whatif", "-c", c["gpt"], "--search"],
    "memory": lambda c: ["memory", "-c", BLOOM],
    "launches": lambda c: ["launches", DEMO],
    "launches --view queue": lambda c: ["launches", "--view", "queue", DLRM],
    "critical-path": lambda c: ["critical-path", DEMO],
    "stragglers": lambda c: ["stragglers", DLRM],
    "annotations": lambda c: ["annotations", DEMO],
    "baseline": lambda c: ["baseline", BASELINES / "all_reduce_perf_h100_2node.txt", BASELINES / "all_gather_perf_mi250x_16rank_2023.txt"],
    "plan": lambda c: ["plan", "-c", BLOOM, "--tokens", "300B", "--mfu", "0.4"],
    "trend": lambda c: ["trend", "--store", c["store"]],
}

#: a number as the tables print it: it must never be broken or cut
NUMBER = re.compile(r"^[-+]?\d[\d,]*(?:\.\d+)?%?$")


def _header_words(text: str) -> set[str]:
    """The words of every table's header rows (between the top rule ┏ and the header rule ┡)."""
    words, inside = set(), False
    for line in text.splitlines():
        if line.startswith("┏"):
            inside = True
        elif line.startswith("┡"):
            inside = False
        elif inside:
            words.update(w for w in re.split(r"[┃\s]+", line) if w)
    return words


def _tokens(text: str) -> set[str]:
    return {w for w in re.split(r"[│┃\s]+", text) if w}


@pytest.mark.parametrize("name", list(TABLES))
def test_tables_fit_80_columns_whole(name, gpt_toml, store):
    argv = TABLES[name]({"gpt": gpt_toml, "store": store})
    narrow = cli(*argv)
    assert narrow.returncode == 0, narrow.stderr
    assert "┃" in narrow.stdout, narrow.stdout  # it printed a table
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 80, [ln for ln in lines if len(ln) > 80]
    # piped: no line padded with spaces (titles, captions and blank lines included)
    assert [ln for ln in lines if ln.endswith(" ")] == []
    # nothing cut short: every header word and every number of the same table printed 300 wide is
    # there whole at 80 columns (headers wrap between words, numbers never wrap)
    wide = cli(*argv, columns=300)
    assert wide.returncode == 0, wide.stderr
    assert "…" not in "".join(_header_words(narrow.stdout))
    assert _header_words(wide.stdout) <= _tokens(narrow.stdout), _header_words(wide.stdout) - _tokens(narrow.stdout)
    numbers = {w for w in _tokens(wide.stdout) if NUMBER.match(w)}
    assert numbers and numbers <= _tokens(narrow.stdout), sorted(numbers - _tokens(narrow.stdout))[:10]


def test_the_readme_command_fits_80_columns_in_one_table():
    """The first command a user runs: one table of rank 0's step, every bucket a column (no split)."""
    done = cli("breakdown", DEMO)
    assert done.returncode == 0, done.stderr
    assert "(continued)" not in done.stdout and done.stdout.count("┏") == 1
    assert "mean of 3 steps" in done.stdout
    # the README's numbers: a 16.212 ms step (its ProfilerStep ranges) of which 10.718 ms exposed
    # communication (66.1 %, counted from the raw JSON in tests/test_docs.py)
    assert re.search(r"│\s+0 │\s+16\.212 │\s+3\.828 │\s+0\.462 │\s+10\.718 │\s+0\.408 │\s+0\.797 │\s+2\.645 │", done.stdout)
    assert re.search(r"│\s+23\.6% │\s+2\.9% │\s+66\.1% │\s+2\.5% │\s+4\.9% │\s+16\.3% │", done.stdout)


def test_a_table_too_wide_is_split_with_its_key_repeated():
    t = Table(title="T", caption="a caption that is longer than the table's parts are wide")
    t.add_column("rank", justify="right")
    t.add_column("group", justify="left")
    for h in ("recompute", "overlapped", "transfer"):
        t.add_column(h, justify="right")
    t.add_row("0", "default", "123.456", "7.891", "0.001")
    buf = io.StringIO()
    console = out_console(buf, 44)  # rank + group + recompute + overlapped: 43 wide; transfer beside them: 54
    console.print(t)
    text = buf.getvalue()
    assert max(map(len, text.splitlines())) <= 44
    # rank and group (the row's key) in both parts; each number once, whole
    assert text.count("default") == 2 and text.count("┃ rank ┃ group") == 2
    for v in ("123.456", "7.891", "0.001", "recompute", "overlapped", "transfer"):
        assert text.count(v) == 1, (v, text)
    assert "(continued)" in text and " ".join(text.split()).endswith("a caption that is longer than the table's parts are wide")
    # a table that fits is left as it is
    small = Table()
    small.add_column("a")
    small.add_row("1")
    assert fit_table(small, console) == [small]


def test_no_trailing_spaces_keeps_the_styling():
    buf = io.StringIO()
    out = NoTrailingSpaces(buf)
    assert out.write("title   \n  cell \x1b[0m\nlast  ") == len("title   \n  cell \x1b[0m\nlast  ")
    assert buf.getvalue() == "title\n  cell\x1b[0m\nlast  "  # a line not yet ended is written as it is


def test_columns_sets_the_width_of_a_pipe():
    wide = cli("breakdown", "--detail", DLRM, columns=200)
    assert max(map(len, wide.stdout.splitlines())) > 80  # the communication table: one table, 200 wide
    assert "(continued)" not in wide.stdout.split("Communication per rank")[1].split("Across ranks")[0]


# --- rows that are zero ------------------------------------------------------------------------

def _zero_terms(terms, *fields) -> list[str]:
    return [t["term"] for t in terms if all(t.get(f) in (None, 0) for f in fields)]


def _label(term: str) -> str:
    from traceanalyzer.render.predictions import label

    return label(term)


def _waterfall_rows(text: str, start: str) -> list[str]:
    """The first column of the table whose title starts with ``start``."""
    block = text.split(start, 1)[1].split("└", 1)[0]
    return [ln.split("│")[1].strip() for ln in block.splitlines() if ln.startswith("│") and ln.split("│")[1].strip()]


def test_reconcile_hides_the_zero_terms_unless_all():
    raw = cli("reconcile", DEMO, "-c", DEMO_TOML, "-f", "json", "-q").stdout
    doc = json.loads(raw)
    zero = [t for t in _zero_terms(doc["terms"], "tflops", "time_ms", "predicted_ms") if t != "achieved"]
    assert len(zero) >= 5  # one rank of a DP job: no TP/PP/CP/EP communication, no bubble
    default = cli("reconcile", DEMO, "-c", DEMO_TOML, "-q", columns=200).stdout
    every = cli("reconcile", DEMO, "-c", DEMO_TOML, "-q", "--all", columns=200).stdout
    shown, shown_all = _waterfall_rows(default, "Waterfall"), _waterfall_rows(every, "Waterfall")
    assert shown_all == [_label(t["term"]) for t in doc["terms"]] + ["= peak"]
    assert shown == [_label(t["term"]) for t in doc["terms"] if t["term"] not in zero] + ["= peak"]
    assert f"{len(zero)} terms at zero not shown (--all shows them): " + ", ".join(map(_label, zero)) + "." in " ".join(default.split())
    assert "not shown" not in every
    # JSON has every row, the same bytes with or without --all
    assert cli("reconcile", DEMO, "-c", DEMO_TOML, "-f", "json", "-q", "--all").stdout == raw


def test_compare_hides_the_zero_terms_unless_all():
    doc = json.loads(cli("compare", DLRM, DEMO, "-f", "json", "-q").stdout)
    terms = doc["comparison"]["terms"]
    zero = _zero_terms(terms, "a_ms", "b_ms", "contribution_ms")
    assert len(zero) >= 5
    default = cli("compare", DLRM, DEMO, "-q", columns=200).stdout
    every = cli("compare", DLRM, DEMO, "-q", "--all", columns=200).stdout
    rows, rows_all = _waterfall_rows(default, "Step time"), _waterfall_rows(every, "Step time")
    assert rows_all == ["step time", *[_label(t["term"]) for t in terms], "= gap (sum of contributions)"]
    assert rows == ["step time", *[_label(t["term"]) for t in terms if t["term"] not in zero], "= gap (sum of contributions)"]
    assert f"{len(zero)} terms at zero not shown (--all shows them)" in default
    # with run configurations: the waterfalls and the gap table
    gap = _waterfall_rows(cli("compare", DEMO, DEMO, "-c", DEMO_TOML, "-q", columns=200).stdout, "Gap in achieved")
    gap_all = _waterfall_rows(cli("compare", DEMO, DEMO, "-c", DEMO_TOML, "-q", "--all", columns=200).stdout, "Gap in achieved")
    assert "exposed comm: TP" in gap_all and "exposed comm: TP" not in gap and len(gap) < len(gap_all)


def test_markdown_follows_the_table():
    md = cli("reconcile", DEMO, "-c", DEMO_TOML, "-f", "markdown", "-q").stdout
    md_all = cli("reconcile", DEMO, "-c", DEMO_TOML, "-f", "markdown", "-q", "--all").stdout
    assert "| exposed comm: TP |" not in md and "| exposed comm: TP |" in md_all


# --- warnings ----------------------------------------------------------------------------------

def test_the_readme_command_warns_only_about_what_it_shows():
    done = cli("breakdown", DEMO)
    assert done.returncode == 0
    # the step window is what the table shows; the collectives' wait/transfer split is not
    assert "lies in no step window" in done.stderr
    assert "wait/transfer" not in done.stderr and "warning" in done.stderr
    detail = cli("breakdown", "--detail", DEMO)
    assert "wait" in detail.stdout and "transfer" in detail.stdout
    assert "collective wait/transfer for 12 of 17 kernels is an estimate" in detail.stderr
    assert "collective wait/transfer for 5 of 17 kernels is unknown" in detail.stderr
    as_json = cli("breakdown", "-f", "json", DEMO)
    assert "collective wait/transfer for 12 of 17" in as_json.stderr
    for view in (["kernels", DEMO], ["launches", DEMO], ["annotations", DEMO], ["critical-path", DEMO],
                 ["reconcile", DEMO, "-c", DEMO_TOML]):
        assert "wait/transfer" not in cli(*view).stderr, view


# --- whatif --search without a measured anchor -------------------------------------------------

def test_search_without_an_anchor_says_its_mfu_is_an_upper_bound(gpt_toml):
    done = cli("whatif", "-c", gpt_toml, "--search", columns=200)
    assert done.returncode == 0, done.stderr
    doc = json.loads(cli("whatif", "-c", gpt_toml, "--search", "-f", "json").stdout)
    assert doc["anchor_source"] == "analytic" and doc["layouts"][0]["mfu"] == pytest.approx(1.0)
    header = [ln for ln in done.stdout.splitlines() if ln.startswith("┃")][0]
    assert "TFLOP/s/GPU at most" in header and "MFU at most" in header
    assert "ranked by an upper bound of TFLOP/s/GPU" in done.stdout
    words = " ".join(done.stdout.split())
    assert "TFLOP/s/GPU and MFU are analytic upper bounds" in words and "not a prediction of what a run reaches" in words
    # anchored by a reported throughput, the numbers are predictions
    anchored = cli("whatif", "-c", ROOT / "docs" / "examples" / "issue1031-70b.toml", "--search", columns=200)
    assert anchored.returncode == 0, anchored.stderr
    assert "at most" not in anchored.stdout and "ranked by predicted TFLOP/s/GPU" in anchored.stdout


# --- one vocabulary ----------------------------------------------------------------------------

GROUP = typer.main.get_command(app)

#: the metavars of the command line: what kind of value each names
VOCABULARY = {
    "TRACE", "TRACE...", "[TRACE]", "[TRACE]...", "TRACE_A", "TRACE_B", "RUN", "RUN...", "FILE", "[FILE]...", "DIR", "CONFIG",
    "N", "RANK", "STEP", "NAME", "REGEX", "FRACTION", "PERCENT", "GIB", "GB/S", "KEY=VALUE", "NAME=LOW-HIGH", "JOB", "ADDRESS",
    "YYYY-MM-DD", "COUNT", "TFLOPS", "PRICE", "WATTS", "PUE",
}


def _params():
    for name, cmd in sorted(GROUP.commands.items()):
        for p in cmd.params:
            if p.name not in ("version", "no_color", "help"):
                yield name, p


def test_one_metavar_vocabulary_across_commands():
    by_option: dict[tuple[str, str], set[str]] = {}
    for name, p in _params():
        if p.param_type_name == "argument":
            assert p.metavar in VOCABULARY, (name, p.name, p.metavar)
            continue
        if getattr(p, "is_flag", False) or param_kind(p)[0] == "choice":
            continue
        assert p.metavar in VOCABULARY, (name, p.opts, p.metavar)
        by_option.setdefault((p.opts[0], param_kind(p)[0]), set()).add(p.metavar)
    # an option names the same kind of value with the same word in every command
    assert {k: v for k, v in by_option.items() if len(v) > 1} == {}
    assert by_option[("--config", "path")] == {"CONFIG"} and by_option[("--output", "path")] == {"FILE"}
    assert by_option[("--top", "integer")] == {"N"} and by_option[("--step-range", "text")] == {"NAME"}


def test_one_wording_of_output_and_format():
    seen_o = seen_f = 0
    for name, p in _params():
        if "--output" in p.opts:
            seen_o += 1
            assert p.metavar == "FILE", name
            if name != "annotate":  # annotate writes traces into a file or a directory, never to stdout
                assert p.help.startswith(OUTPUT_HELP), (name, p.help)
        if "--format" in p.opts:
            seen_f += 1
            assert p.help.startswith(FORMAT_HELP), (name, p.help)
    assert seen_o == len(GROUP.commands) and seen_f == len(GROUP.commands) - 1  # annotate has no -f


def test_predict_and_whatif_hide_the_zero_terms_unless_all(gpt_toml):
    """One GPU: no communication, no bubble, no recompute: those terms are zero in the prediction."""
    doc = json.loads(cli("predict", "-c", gpt_toml, "-f", "json").stdout)
    zero = [k for k, v in doc["prediction"]["waterfall"].items() if v == 0 and k != "achieved"]
    assert {"recompute", "bubble"} <= set(zero)
    default = cli("predict", "-c", gpt_toml, columns=200).stdout
    every = cli("predict", "-c", gpt_toml, "--all", columns=200).stdout
    rows, rows_all = _waterfall_rows(default, "Predicted waterfall"), _waterfall_rows(every, "Predicted waterfall")
    assert rows_all == [_label(k) for k in doc["prediction"]["waterfall"]] + ["= peak"]
    assert rows == [_label(k) for k in doc["prediction"]["waterfall"] if k not in zero] + ["= peak"]
    assert f"{len(zero)} terms at zero not shown (--all shows them)" in default
    # no communication at all: said in a line, not an empty table
    assert "Communication per GPU per step: none" in default
    res = json.loads(cli("whatif", "-c", gpt_toml, "--set", "micro_batch=4", "-f", "json").stdout)
    zero = [t["term"] for t in res["terms"] if t["anchor_s"] == 0 and t["predicted_s"] == 0]
    assert zero
    default = cli("whatif", "-c", gpt_toml, "--set", "micro_batch=4", columns=200).stdout
    every = cli("whatif", "-c", gpt_toml, "--set", "micro_batch=4", "--all", columns=200).stdout
    assert _waterfall_rows(every, "Step per GPU") == [_label(t["term"]) for t in res["terms"]] + ["= step"]
    assert _waterfall_rows(default, "Step per GPU") == [_label(t["term"]) for t in res["terms"] if t["term"] not in zero] + ["= step"]
