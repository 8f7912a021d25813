"""What the report shows, as a reader sees it: the headline states finding 1 (the loss
``breakdown`` prints first), kernel and op names shortened so that different names read
differently (the full name on hover and in the JSON), idle causes as a tree whose children sum
to their parent, and no ``-0.0`` anywhere, on the shared H200 traces, the DLRM 8-rank job and a
single-GPU fixture."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pytest

from traceanalyzer.cli import main

from conftest import DEMO, DLRM, TRACES, shared_or_skip

H200 = TRACES / "h200"
H200_RUNS = shared_or_skip([pytest.param(H200 / v / "rank0.pt.trace.json.gz", id=f"h200-{v}")
                            for v in ("base", "recompute", "stalls", "small", "compiled", "b4")])
JOBS = [pytest.param(DLRM, id="dlrm-8rank"), pytest.param(DEMO, id="mi300x-1gpu"), *H200_RUNS]


class _Tables(HTMLParser):
    """Each ``table.data``'s body rows: per cell its text and its ``title`` (hover text)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[tuple[str, str | None]]]] = {}
        self.headline_title: str | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._title: str | None = None
        self._in_body = False
        self._in_head_title = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "data" in (a.get("class") or ""):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tbody" and self._table:
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.tables[self._table].append([])
        elif tag == "td" and self._in_body:
            self._cell, self._title = [], a.get("title")
        elif tag == "b" and a.get("id") == "headline-title":
            self._in_head_title, self.headline_title = True, ""

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.tables[self._table][-1].append(("".join(self._cell), self._title))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None
        elif tag == "b":
            self._in_head_title = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_head_title:
            self.headline_title += data


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Per job: (the breakdown's printed finding lines, the HTML, the Markdown, the JSON report)."""
    made = {}

    def get(path):
        if path not in made:
            d = tmp_path_factory.mktemp("display")
            for fmt, name in (("html", "r.html"), ("markdown", "r.md"), ("json", "r.json")):
                assert main(["report", str(path), "-q", "-f", fmt, *(["--embed"] if fmt == "markdown" else []),
                             "-o", str(d / name)]) == 0
            made[path] = ((d / "r.html").read_text(), (d / "r.md").read_text(), json.loads((d / "r.json").read_text()))
        return made[path]

    return get


def _breakdown_findings(path, capsys, monkeypatch) -> list[str]:
    """The numbered lines of ``breakdown``'s findings list, as the terminal prints them."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per finding title, never wrapped
    capsys.readouterr()
    assert main(["breakdown", str(path), "-q"]) == 0
    out = capsys.readouterr().out
    return re.findall(r"^(\d+)\. (.*)$", out, re.M)


@pytest.mark.parametrize("path", JOBS)
def test_the_headline_is_finding_1_as_breakdown_prints_it(path, reports, capsys, monkeypatch):
    page, md, doc = reports(path)
    lines = _breakdown_findings(path, capsys, monkeypatch)
    p = _Tables()
    p.feed(page)
    h = doc["headline"]
    if lines:
        number, first = lines[0]
        assert number == "1"
        assert p.headline_title == first == h["title"]  # the HTML headline, the JSON's, the terminal's finding 1
        assert f"**Finding 1: {first.replace('|', chr(92) + '|')}**" in md
        assert h["finding"]["label"] == doc["findings"][0]["label"] and first.startswith(doc["findings"][0]["label"] + ": ")
        assert h["sentence"].startswith(f"Finding 1: {first}. Mean step time ")
        # the KPI row of the headline names the same loss with the same number
        assert f"biggest loss (finding 1): {h['finding']['label']} (ms per step)" in html.unescape(page)
    else:  # no loss reaches a finding: the headline says so, never names a bucket as the loss
        assert doc["findings"] == [] and h["finding"] is None
        assert p.headline_title == h["title"] == "No single loss of 1% of the step or more"
    assert "biggest loss is" not in page and "biggest loss is" not in md


@pytest.mark.parametrize("path", H200_RUNS)
def test_the_headline_names_the_loss_truth_json_says_the_run_had(path, reports):
    """Against what was measured outside the trace (truth.json): the 40 ms sleep after each step
    of ``stalls`` is finding 1 (host outside every op), full recompute is ``recompute``'s, and the
    compute-bound ``base`` step has no loss of 1 % at all."""
    truth = json.loads((path.parent / "truth.json").read_text())
    _page, _md, doc = reports(path)
    h = doc["headline"]
    cfg = truth["config"]
    if cfg["stall"] > 0:
        assert h["finding"]["loss"] == "idle_host_untraced"
        assert 1000 * cfg["stall"] <= h["finding"]["ms_per_step"] <= 1000 * cfg["stall"] * 1.1
    elif cfg["recompute"]:
        assert h["finding"]["loss"] == "recompute"
    elif path.parent.name == "base":
        assert h["finding"] is None
    if h["finding"] is not None:
        f = h["finding"]
        assert h["title"] == f"{f['label']}: {f['ms_per_step']:.3f} ms per step ({f['pct_of_step']:.1f}% of the step)"
        assert f["pct_of_step"] == pytest.approx(100 * f["share_of_step"])


def _name_tables(doc) -> dict[str, list[str]]:
    """The report's tables of kernel or op names: table id -> the full names, in row order."""
    out = {"top-exposed-collectives": [k["name"] for k in doc["top_exposed_collectives"]],
           "recomputed-ops": [r["name"] for r in doc["causes"]["recomputed_ops"]]}
    if doc.get("kernels"):
        out["kernels"] = [r["name"] for r in doc["kernels"]["rows"]]
    else:
        out["top-kernels"] = [k["name"] for k in doc["top_kernels"]]
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("path", [pytest.param(DLRM, id="dlrm-8rank"), *H200_RUNS])
def test_shown_names_differ_wherever_the_full_names_do(path, reports):
    page, md, doc = reports(path)
    p = _Tables()
    p.feed(page)
    tables = _name_tables(doc)
    assert "kernels" in tables or "top-kernels" in tables
    shortened = 0
    for tid, full in tables.items():
        cells = [row[0] for row in p.tables[tid]]
        shown = [text for text, _ in cells]
        assert len(shown) == len(full)
        # the hover text is the full name wherever the cell shows less; a shown name is the whole name otherwise
        assert [title or text for text, title in cells] == full
        for (text, title), name in zip(cells, full):
            assert len(text) <= 64
            if title is not None:
                shortened += 1
                assert text != name and "…" in text
        # names that differ read differently (pairwise)
        for i in range(len(full)):
            for j in range(i + 1, len(full)):
                if full[i] != full[j]:
                    assert shown[i] != shown[j], (tid, full[i], full[j])
        # the Markdown shows the same shortened names
        for text in shown:
            assert f"`{text.replace('|', chr(92) + '|')}`" in md
    if path == DLRM:
        assert shortened >= 5  # DLRM's long templated names: shortened, and still told apart


@pytest.mark.parametrize("path", [pytest.param(DLRM, id="dlrm-8rank"), *H200_RUNS])
def test_idle_causes_are_a_tree_whose_children_sum_to_their_parent(path, reports):
    page, md, doc = reports(path)
    p = _Tables()
    p.feed(page)
    rows = p.tables["idle-causes"]
    c = doc["causes"]
    # idle first (a share of the step), then each cause (a share of idle), host-bound's split under host-bound
    assert rows[0][0][0] == "idle" and rows[0][3][0] == "step"
    assert float(rows[0][2][0]) == pytest.approx(c["idle_total"]["pct_of_step"], abs=0.05)
    parents = [r[3][0] for r in rows[1:]]
    assert set(parents) <= {"idle", "host-bound"}
    for parent in ("idle", "host-bound"):
        shares = [float(r[2][0]) for r in rows[1:] if r[3][0] == parent]
        if shares:
            assert sum(shares) == pytest.approx(100.0, abs=0.05 * len(shares))  # shares of one parent: 100 %, never ~200 %
    ms = {r[0][0]: float(r[1][0]) for r in rows}
    idle_ns = sum(s["idle_ms"] for s in doc["steps"]) / len(doc["steps"])
    assert ms["idle"] == pytest.approx(idle_ns, abs=0.0005)  # the model's total equals the steps' mean idle
    assert sum(float(r[1][0]) for r in rows[1:] if r[3][0] == "idle") == pytest.approx(ms["idle"], abs=0.003)
    assert "host-bound" in [r[0][0] for r in rows] and parents.count("host-bound") >= 2
    # indented: causes one level, the host's split two (class i1 / i2 in the HTML, no-break spaces in the Markdown)
    assert page.count('<td class="i1">') == parents.count("idle") and page.count('<td class="i2">') == parents.count("host-bound")
    assert "| \u00a0\u00a0\u00a0\u00a0host-bound |" in md


@pytest.mark.parametrize("path", JOBS)
def test_no_minus_zero_anywhere(path, reports):
    page, md, _doc = reports(path)
    for text in (page, md):
        body = re.sub(r"<script>.*?</script>|<style>.*?</style>", "", text, flags=re.S)
        assert not re.search(r"(?<![\w.])[-\u2212]0(\.0+)?(?![\d.])", re.sub(r"<[^>]+>", " ", html.unescape(body))), path


class _Headers(HTMLParser):
    """Each ``table.data``'s header texts."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: dict[str, list[str]] = {}
        self._table: str | None = None
        self._th: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "data" in (a.get("class") or ""):
            self._table = a["id"]
            self.headers[self._table] = []
        elif tag == "th" and self._table:
            self._th = []

    def handle_endtag(self, tag):
        if tag == "th" and self._th is not None:
            self.headers[self._table].append("".join(self._th))
            self._th = None

    def handle_data(self, data):
        if self._th is not None:
            self._th.append(data)


@pytest.mark.parametrize("path", JOBS)
def test_every_unit_column_holds_plain_numbers_in_the_unit_its_header_names(path, reports):
    """One unit per column, named in its header (``total ms``, ``mean µs``, ``size MiB``): every
    cell of such a column is a bare number, so no column mixes ms with µs or KiB with MiB; the
    input files' sizes are their byte counts in that one unit."""
    page, _md, doc = reports(path)
    p, h = _Tables(), _Headers()
    p.feed(page)
    h.feed(page)
    unit = re.compile(r"(?:^|\s)(ms|µs|%|B|KiB|MiB|GiB)(?:\s|$)")
    bare = re.compile(r"-?\d+(\.\d+)?")
    checked = 0
    for tid, heads in h.headers.items():
        for j, head in enumerate(heads):
            if not unit.search(head) or head.startswith("#"):
                continue
            for row in p.tables[tid]:
                text = row[j][0]
                assert text in ("", "-") or bare.fullmatch(text), (tid, head, text)
                checked += 1
    assert checked > 50
    sizes = next(heads for tid, heads in h.headers.items() if tid == "inputs")
    (col,) = [j for j, x in enumerate(sizes) if x.startswith("size ")]
    scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[sizes[col].split()[1]]
    for row, f in zip(p.tables["inputs"], doc["reproduce"]["inputs"], strict=True):
        if f["size_bytes"] is not None:
            assert float(row[col][0]) == pytest.approx(f["size_bytes"] / scale, abs=0.05 if scale > 1 else 0)
