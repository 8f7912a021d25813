"""``traceanalyzer report``: the report model against independent computations, and the HTML /
Markdown renderings against the JSON (every displayed number), images, self-containedness."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import sys
from collections import defaultdict
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path

import orjson
import pytest
from PIL import Image

import traceanalyzer as ta
from traceanalyzer.api.loading import input_fingerprints, run_configuration
from traceanalyzer.classify import BUCKETS
from traceanalyzer.render.names import shorten
from traceanalyzer.render.sections import NAME_WIDTH
from traceanalyzer.views import document as report_model
from traceanalyzer.render import html as html_render
from traceanalyzer.render import markdown as md_render
from traceanalyzer.render import plots

from conftest import DEMO, DLRM, FIXTURES, ROOT, TRACES, independent_steps, run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOSSES = ["recompute", "exposed_comm", "other", "idle"]


def _model(path, config=None, **kw):
    """The report model as the API builds it: the run configuration loaded and the inputs
    fingerprinted beforehand (the model reads no file)."""
    analysis = ta.analyze(ta.load(path))
    return report_model.build(analysis, config=run_configuration(config), inputs=input_fingerprints(analysis.trace.sources, config), **kw)


def _get(doc, path):
    v = doc
    for part in path.split("."):
        v = v[int(part)] if isinstance(v, list) else v[part]
    return v


def _check_png(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_MAGIC
    im = Image.open(io.BytesIO(data))
    im.load()  # decodes every pixel: raises on a corrupt image
    assert im.size[0] > 200 and im.size[1] > 100
    extrema = im.convert("L").getextrema()
    assert extrema[0] < extrema[1], "blank image"
    return im.size


# ---------------------------------------------------------------------------------------------
# the model against independent computations


def _naive(steps_rows):
    """Per rank: steps, summed ns per field, from the breakdown rows (plain Python)."""
    out = defaultdict(lambda: defaultdict(int))
    for r in steps_rows:
        out[r["rank"]]["steps"] += 1
        for f in ["duration", *BUCKETS, "overlapped_comm"]:
            out[r["rank"]][f] += r[f"{f}_ns"]
    return out


@pytest.mark.parametrize("path", [DLRM, DEMO], ids=["dlrm-8rank", "mi300x"])
def test_model_numbers_against_the_breakdown(path):
    analysis = ta.analyze(ta.load(path))
    m = report_model.build(analysis)
    naive = _naive(analysis.steps.to_dicts())
    assert [r["rank"] for r in m["ranks"]] == sorted(naive)
    for r in m["ranks"]:
        n = naive[r["rank"]]
        assert r["steps"] == n["steps"]
        assert r["step_ms"] == pytest.approx(n["duration"] / n["steps"] / 1e6, rel=1e-12)
        for b in BUCKETS:
            assert r["buckets"][b]["ms"] == pytest.approx(n[b] / n["steps"] / 1e6, rel=1e-12, abs=1e-12)
            assert r["buckets"][b]["pct"] == pytest.approx(100 * n[b] / n["duration"], rel=1e-12, abs=1e-12)
        assert sum(r["buckets"][b]["pct"] for b in BUCKETS) == pytest.approx(100.0)
    # headline: biggest loss over all ranks, mean step over all rank-steps
    tot = {f: sum(n[f] for n in naive.values()) for f in ["duration", "steps", *LOSSES]}
    big = max(LOSSES, key=lambda b: tot[b])
    h = m["headline"]
    assert h["biggest_loss"]["bucket"] == big
    assert h["biggest_loss"]["pct"] == pytest.approx(100 * tot[big] / tot["duration"])
    assert h["step_ms"] == pytest.approx(tot["duration"] / tot["steps"] / 1e6)
    # the headline states finding 1 (a cause within a bucket), never the largest bucket as the loss
    first = m["findings"][0]
    assert h["finding"]["loss"] == first["loss"] and h["title"].startswith(first["label"] + ": ")
    assert f"{first['ms_per_step']:.3f} ms per step" in h["title"] and h["title"] in h["sentence"]
    # the slowest rank is the default timeline rank
    assert m["timeline"]["rank"] == h["slowest_rank"] == max(m["ranks"], key=lambda r: r["step_ms"])["rank"]


def test_dlrm_pinned_headline():
    # DLRM, 8 V100 ranks, one step each: rank 1 is slowest (19.901 ms, its ProfilerStep range);
    # idle is the biggest loss
    m = _model(DLRM)
    h = m["headline"]
    assert h["slowest_rank"] == 1 and round(h["slowest_rank_step_ms"], 3) == 19.901
    assert h["biggest_loss"]["bucket"] == "idle"
    assert m["ranks"][0]["buckets"]["exposed_comm"]["ms"] == 5.537  # = test_partition's hand computation
    assert m["ranks"][0]["buckets"]["idle"]["ms"] == pytest.approx(7.865, abs=1e-9)


def test_timeline_runs_are_maximal_and_sum_to_the_partition():
    analysis = ta.analyze(ta.load(DEMO))
    m = report_model.build(analysis, rank=0)
    runs = m["timeline"]["runs"]
    steps = {s["step"]: s for s in m["steps"] if s["rank"] == 0}
    sums = defaultdict(float)
    prev = None
    for st, s, e, b in zip(runs["step"], runs["start_ms"], runs["end_ms"], runs["bucket"]):
        assert e > s
        if prev and prev[0] == st:
            assert s == pytest.approx(prev[1])  # contiguous inside a step
            assert b != prev[2]  # maximal: neighbours differ
        prev = (st, e, b)
        sums[(st, b)] += e - s
    for st, row in steps.items():
        for b in BUCKETS:
            assert sums[(st, b)] == pytest.approx(row[f"{b}_ms"], abs=1e-9)
    assert {r["step"] for r in m["timeline"]["steps"]} == set(steps) == {15, 16, 17}


def _naive_exposed_by_name(gpu_rows, w0, w1):
    """Plain-Python reference: every elementary segment of [w0, w1) with comm active and no
    compute/recompute is shared equally among the active comm kernels."""
    iv = [(max(s, w0), min(e, w1), c, n) for s, e, c, n in gpu_rows if min(e, w1) > max(s, w0)]
    cuts = sorted({w0, w1, *[x[0] for x in iv], *[x[1] for x in iv]})
    out = defaultdict(float)
    for a, b in zip(cuts, cuts[1:]):
        active = [x for x in iv if x[0] <= a and x[1] >= b]
        if any(x[2] in ("compute", "recompute") for x in active):
            continue
        comm = [x for x in active if x[2] == "comm"]
        for x in comm:
            out[x[3]] += (b - a) / len(comm)
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_exposed_collectives_equal_a_naive_sweep(rank):
    path = sorted(DLRM.glob(f"worker{rank}_*"))[0]
    analysis = ta.analyze(ta.load(path))
    m = report_model.build(analysis, top=1000)
    (w0, w1) = analysis.windows.select("wstart_ns", "wend_ns").row(0)
    rows = analysis.gpu.select("start_ns", "end_ns", "cls", "name").rows()
    ref = _naive_exposed_by_name(rows, w0, w1)
    got = {c["name"]: c["exposed_ms"] * 1e6 for c in m["top_exposed_collectives"]}
    assert set(got) == {k for k, v in ref.items() if v > 0}
    for k, v in ref.items():
        if v > 0:
            assert got[k] == pytest.approx(v, rel=1e-9)
    # and they add up to the partition's exposed comm exactly
    assert sum(got.values()) == pytest.approx(analysis.steps["exposed_comm_ns"].sum(), rel=1e-12)


def test_top_kernels_against_a_group_by_of_the_raw_json():
    import gzip

    path = sorted(DLRM.glob("worker0_*"))[0]
    doc = orjson.loads(gzip.open(path).read())
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    m = _model(path, top=3)
    # one step covering all GPU work on this rank's window: group the raw kernels by name
    totals = defaultdict(float)
    calls = defaultdict(int)
    for e in kernels:
        totals[e["name"]] += e["dur"]
        calls[e["name"]] += 1
    best = sorted(totals, key=lambda k: -totals[k])[:3]
    assert [k["name"] for k in m["top_kernels"]] == best
    for k in m["top_kernels"]:
        assert k["total_ms"] == pytest.approx(totals[k["name"]] / 1000)
        assert k["calls"] == calls[k["name"]]


@pytest.mark.parametrize("path,ref", independent_steps())
def test_report_buckets_equal_the_independent_count_on_every_real_trace(path, ref):
    """The report's mean step and buckets (ms) against the steps counted independently from the
    raw JSON (tests/data/hta_reference.json ``raw_steps``, where compute includes recompute)."""
    analysis = ta.analyze(ta.load(path))
    m = report_model.build(analysis, top=1000, inputs=input_fingerprints(analysis.trace.sources))
    orjson.dumps(m)  # JSON-ready
    [r] = m["ranks"]
    n = len(ref)
    assert r["steps"] == n
    mean = lambda k: sum(s[k] for s in ref) / n / 1e6  # noqa: E731
    assert r["step_ms"] == pytest.approx(mean("span_ns"), rel=1e-12)
    assert r["buckets"]["compute"]["ms"] + r["buckets"]["recompute"]["ms"] == pytest.approx(mean("compute_ns"), rel=1e-12, abs=1e-12)
    for b, k in (("exposed_comm", "exposed_comm_ns"), ("other", "other_ns"), ("idle", "idle_ns")):
        assert r["buckets"][b]["ms"] == pytest.approx(mean(k), rel=1e-12, abs=1e-12), b
    exposed = sum(c["exposed_ms"] for c in m["top_exposed_collectives"])
    assert exposed == pytest.approx(sum(s["exposed_comm_ns"] for s in ref) / 1e6, rel=1e-9, abs=1e-9)
    inputs = m["reproduce"]["inputs"]
    assert inputs[0]["size_bytes"] == Path(path).stat().st_size and len(inputs[0]["sha256"]) == 64


# ---------------------------------------------------------------------------------------------
# renderings against the JSON


def _marks(page: str, plot_id: str) -> list[tuple[str, str]]:
    """(data-key, hover text) of every rectangle with a title in the SVG plot ``plot_id``."""
    m = re.search(rf'<svg class="plot" id="{plot_id}".*?</svg>', page, re.S)
    assert m, plot_id
    return [(k, unescape(t)) for k, t in re.findall(r'<rect data-key="([^"]*)"[^>]*><title>([^<]*)</title>', m.group(0))]


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cells: list[tuple[str, str]] = []
        self.imgs: list[str] = []
        self.svgs: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self._path = None
        self._text = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "svg":
            self.svgs.append(a.get("id", ""))
        if a.get("data-path"):
            self._path, self._text = a["data-path"], []

    def handle_data(self, data):
        if self._path:
            self._text.append(data)

    def handle_endtag(self, tag):
        if self._path and tag in ("td", "b"):
            self.cells.append((self._path, "".join(self._text)))
            self._path = None


def _assert_shown(value, text):
    """``text`` shows ``value`` rounded to the decimals it displays."""
    if isinstance(value, int) and "." not in text:
        assert int(text) == value
        return
    decimals = len(text.split(".")[1]) if "." in text else 0
    assert abs(float(text) - value) <= 0.5 * 10**-decimals + 1e-9, (text, value)
    assert text == f"{value:.{decimals}f}"


def _report(tmp_path, path, fmt, *extra):
    """Run ``traceanalyzer report`` in-process (the CLI's own entry point, without the start-up
    cost of a subprocess); the subprocess path is covered by the error test."""
    from traceanalyzer.cli import main

    out = tmp_path / {"html": "r.html", "markdown": "r.md", "json": "r.json"}[fmt]
    code = main(["report", str(path), "--format", fmt, "-o", str(out), *map(str, extra)])
    assert code == 0
    return out


EXTERNAL = [
    re.compile(r"""(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", re.I),
    re.compile(r"<script[^>]*\bsrc\s*=", re.I),
    re.compile(r"<link\b", re.I),
    re.compile(r"@import", re.I),
    re.compile(r"url\(\s*['\"]?\s*(?:https?:)?//", re.I),
    re.compile(r"<iframe|<object|<embed", re.I),
]


@pytest.mark.parametrize("path", [DLRM, DEMO], ids=["dlrm-8rank", "mi300x"])
def test_html_numbers_equal_the_json_and_it_is_self_contained(tmp_path, path):
    html = _report(tmp_path, path, "html").read_text()
    doc = orjson.loads(_report(tmp_path, path, "json").read_bytes())
    assert doc["schema"] == "traceanalyzer.report" and doc["schema_version"] == 1
    p = _Collect()
    p.feed(html)
    paths = {c[0] for c in p.cells}
    n_ranks = len(doc["ranks"])
    # every number of every rank row and both top tables is shown, and shown right
    for i in range(n_ranks):
        for b in BUCKETS:
            assert f"ranks.{i}.buckets.{b}.ms" in paths and f"ranks.{i}.buckets.{b}.pct" in paths
    assert f"kernels.rows.{len(doc['kernels']['rows']) - 1}.total_ms" in paths  # the kernels section replaced the top-kernel table
    assert "headline.step_ms" in paths
    for cell_path, text in p.cells:
        _assert_shown(_get(doc, cell_path), text)
    assert f'<b id="headline-title">{escape(doc["headline"]["title"])}</b>' in html
    assert escape(doc["headline"]["context"]) in html
    # kernel names are escaped, not interpreted as tags
    assert "<c10::" not in html
    # plots: partition, a timeline per rank the model holds, heatmap (no waterfall without a config), all inline SVG
    timeline_ranks = [doc["timeline"]["rank"], *[t["rank"] for t in doc["more_timelines"]]]
    assert p.imgs == []
    steps = sorted({s["step"] for s in doc["steps"]})  # a partition view per step when there are several
    per_step = [f"plot-partition-step-{s}" for s in steps] if len(steps) > 1 else []
    assert len(steps) == (1 if path == DLRM else 3)
    # and for a job of several ranks who waited on whom, one matrix per collective (two at most)
    waits = [f"plot-waits-{m['collective']}-{m['group']}" for m in (doc.get("straggler_costs") or {}).get("wait_matrix", [])[:2]]
    assert p.svgs == ["plot-partition", *per_step, *[f"plot-timeline-rank-{r}" for r in timeline_ranks], "plot-heatmap", *waits]
    if n_ranks > 1:  # the straggler costs are shown, each number as the JSON has it (checked above)
        assert waits and "straggler_costs.costs.0.cost_ms_per_step" in paths
        # every cell of the first matrix says who waited on whom, as the JSON has it
        m0 = doc["straggler_costs"]["wait_matrix"][0]
        marks = _marks(html, waits[0])
        assert len(marks) == sum(1 for row in m0["wait_ms"] for v in row if v) > 0  # a pair with no wait has no cell
        for key, title in marks:
            i, j = (m0["ranks"].index(int(x)) for x in key.split("-"))
            got = re.fullmatch(r"rank \d+ waited (\S+) ms per step on rank \d+ in .*", title)
            assert got, title
            _assert_shown(m0["wait_ms"][i][j], got.group(1))
    # every mark of the partition plot shows its number on hover, as the JSON has it
    bars = _marks(html, "plot-partition")
    assert len(bars) == n_ranks * len(BUCKETS)
    for (key, title), (r, b) in zip(bars, [(r, b) for r in doc["ranks"] for b in BUCKETS], strict=True):
        assert key == b
        m = re.fullmatch(rf"rank {r['rank']} · [a-z ]+: (\S+) ms per step \((\S+)% of the step\)", title)
        assert m, title
        _assert_shown(r["buckets"][b]["ms"], m.group(1))
        _assert_shown(r["buckets"][b]["pct"], m.group(2))
    # a kernel name cut to fit shows its full name on hover, as the JSON has it
    names = re.findall(r'<tr><td(?: class="w")?(?: title="([^"]*)")?><code>([^<]*)</code></td>',
                       re.search(r'<table class="data" id="kernels".*?</table>', html, re.S).group(0))
    assert [unescape(t or n) for t, n in names] == [k["name"] for k in doc["kernels"]["rows"]]
    cut = [(unescape(t), unescape(n)) for t, n in names if t]
    assert cut and all("…" in n and len(t) > len(n) for t, n in cut)
    for t, n in cut:  # what is shown is the name's start, pieces of it in order, and its end
        parts = n.split("…")
        assert t.startswith(parts[0]) and t.endswith(parts[-1])
        at = 0
        for piece in parts:
            at = t.index(piece, at) + len(piece)
    cells = _marks(html, "plot-heatmap")
    assert len(cells) == n_ranks * len(BUCKETS) and all("% of the step" in t for _k, t in cells)
    assert len(html.encode()) < (2_000_000 if path == DLRM else 400_000)
    for pat in EXTERNAL:
        assert not pat.search(html), pat.pattern
    scripts = [a for tag, a in p.tags if tag == "script"]
    assert scripts == [{}]  # one inline script, no src
    for tag, attrs in p.tags:
        for k, v in attrs.items():
            if k in ("src", "href"):
                assert (v or "").startswith(("data:", "#")), (tag, k, v[:60])
    # reproduction: command, version, inputs with sizes and hashes
    assert "traceanalyzer report" in html and doc["tool"]["version"] in html
    for f in doc["reproduce"]["inputs"]:
        assert f["sha256"] in html and str(f["size_bytes"]) in html


def test_html_step_views_and_timelines_stay_within_their_budgets():
    """A job of many ranks and steps (the DLRM ranks repeated): the step views stop at 16 steps
    and 256 bars, the timelines at the model's 8 ranks, so the page stays small."""
    import copy

    base = _model(DLRM, ranks="summary")
    for n_ranks, n_steps, views in ((128, 20, 2), (1, 40, 16), (1, 1, 0)):
        m = copy.deepcopy(base)
        m["ranks"] = [dict(copy.deepcopy(base["ranks"][k % 8]), rank=k) for k in range(n_ranks)]
        m["steps"] = [dict(copy.deepcopy(base["steps"][k % 8]), rank=k, step=st) for k in range(n_ranks) for st in range(n_steps)]
        page = html_render.render(m)
        ids = re.findall(r'<svg class="plot" id="([^"]+)"', page)
        assert [i for i in ids if i.startswith("plot-partition-step-")] == [f"plot-partition-step-{st}" for st in range(views)]
        assert len([i for i in ids if i.startswith("plot-timeline")]) == 1 + len(base["more_timelines"]) == 8
        if n_ranks == 128:
            assert f"{n_steps - views} more steps in the JSON report." in page
            assert len(page.encode()) < 1_000_000


def _md_tables(text: str) -> dict[str, list[list[str]]]:
    """Markdown tables keyed by their header line."""
    out, cur, key = {}, None, None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if cur is None:
                key, cur = " | ".join(cells), []
            elif not set(line) <= set("|-: "):
                cur.append(cells)
        elif cur is not None:
            out[key], cur = cur, None
    if cur is not None:
        out[key] = cur
    return out


def test_markdown_numbers_equal_the_json_and_pngs_beside_it(tmp_path):
    out = _report(tmp_path, DLRM, "markdown")
    md = out.read_text()
    doc = orjson.loads(_report(tmp_path, DLRM, "json").read_bytes())
    assert len(md) < 20_000  # pasteable
    tables = _md_tables(md)
    ranks = next(v for k, v in tables.items() if k.startswith("rank | steps"))
    assert len(ranks) == len(doc["ranks"]) == 8
    for row, r in zip(ranks, doc["ranks"], strict=True):
        assert int(row[0]) == r["rank"]
        _assert_shown(r["step_ms"], row[2])
        for j, b in enumerate(BUCKETS):
            _assert_shown(r["buckets"][b]["ms"], row[3 + j])
            _assert_shown(r["buckets"][b]["pct"], row[8 + j])
        _assert_shown(r["overlapped_comm"]["ms"], row[13])
    coll = next(v for k, v in tables.items() if k.startswith("collective kernel"))
    assert len(coll) == len(doc["top_exposed_collectives"]) > 0
    full = [c["name"] for c in doc["top_exposed_collectives"]]
    for row, c, shown in zip(coll, doc["top_exposed_collectives"], shorten(full, NAME_WIDTH), strict=True):
        # the name as the tables shorten it (start and end kept, distinct names distinct); the JSON has it whole
        name = row[0].strip("`")
        assert name == shown and (name == c["name"] or ("…" in name and c["name"].startswith(name.split("…")[0])))
        _assert_shown(c["exposed_ms"], row[2])
        _assert_shown(c["pct_of_exposed_comm"], row[5])
    head = tables["headline | value"]
    assert any(r[1] == f"{doc['headline']['step_ms']:.3f}" for r in head)
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert refs == ["r_partition.png", "r_timeline.png", "r_heatmap.png", *(["r_waits.png"] if doc.get("straggler_costs") else [])]
    for ref in refs:
        _check_png((out.parent / ref).read_bytes())


def test_markdown_embed_uses_data_uris_and_writes_no_png(tmp_path):
    out = _report(tmp_path, DEMO, "markdown", "--embed")
    md = out.read_text()
    refs = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(refs) == 3 and all(r.startswith("data:image/png;base64,") for r in refs)
    for r in refs:
        _check_png(base64.b64decode(r.split(",", 1)[1]))
    assert not list(tmp_path.glob("*.png"))


def test_markdown_caps_long_tables():
    m = _model(DLRM)
    m["ranks"] = m["ranks"] * 3  # 24 rows
    text = md_render.render(m, {})
    rows = next(v for k, v in _md_tables(text).items() if k.startswith("rank | steps"))
    assert len(rows) == md_render.MAX_RANKS
    assert "8 more ranks" in text


# ---------------------------------------------------------------------------------------------
# the waterfall section (from traceanalyzer.reconcile)


def test_waterfall_from_the_reconciler_feeds_headline_plot_and_tables():
    from traceanalyzer.model import load_config
    from traceanalyzer.reconciliation import waterfall

    cfg = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
    m = _model(DEMO, config=cfg)
    wf = m["waterfall"]
    direct = waterfall(ta.analyze(ta.load(DEMO)), load_config(cfg, None))
    assert wf["achieved_tflops"] == direct["achieved_tflops"] and wf["peak_tflops"] == direct["peak_tflops"] == 1307.4
    assert [t["key"] for t in wf["terms"]] == [t["term"] for t in direct["terms"] if t["term"] != "achieved"]
    assert wf["achieved_tflops"] + sum(t["tflops"] for t in wf["terms"]) == pytest.approx(wf["peak_tflops"])
    assert wf["residual_tflops"] == pytest.approx(0.0, abs=1e-9)
    assert m["headline"]["mfu"] == direct["mfu"]
    assert m["reproduce"]["inputs"][-1]["role"] == "config"
    assert m["reproduce"]["inputs"][-1]["sha256"] == hashlib.sha256(cfg.read_bytes()).hexdigest()
    images = plots.render_all(m)
    assert list(images) == ["partition", "timeline", "waterfall", "heatmap"]
    _check_png(images["waterfall"])
    page = html_render.render(m)
    p = _Collect()
    p.feed(page)
    cells = dict(p.cells)
    assert cells["headline.achieved_tflops"] == f"{direct['achieved_tflops']:.1f}"
    assert "plot-waterfall" in p.svgs
    cols = _marks(page, "plot-waterfall")
    shown = [t for t in wf["terms"] if round(t["tflops"], 1) != 0]  # terms that round to 0.0 have no column
    assert 0 < len(shown) < len(wf["terms"])
    assert [k for k, _t in cols] == ["peak", *[t["key"] for t in shown], "achieved"]
    for (_k, title), t in zip(cols[1:-1], shown, strict=True):
        assert title == f"{t['label']}: −{t['tflops']:.1f} TFLOP/s per GPU"
    assert cols[0][1] == f"peak: {wf['peak_tflops']:.1f} TFLOP/s per GPU"
    assert cols[-1][1] == f"achieved: {direct['achieved_tflops']:.1f} TFLOP/s per GPU"


def test_normalize_waterfall_accepts_dataclasses_and_rejects_junk():
    from dataclasses import dataclass, field

    @dataclass
    class W:
        achieved_tflops: float = 100.0
        peak_tflops: float = 400.0
        terms: list = field(default_factory=lambda: [{"name": "idle", "tflops": 300.0}])

    wf = report_model.normalize_waterfall(W())
    assert wf["terms"] == [{"key": "idle", "label": "idle", "tflops": 300.0}] and wf["residual_tflops"] == 0.0
    assert report_model.normalize_waterfall({"achieved_tflops": "x"}) is None
    assert report_model.normalize_waterfall(None) is None


# ---------------------------------------------------------------------------------------------
# CLI errors


def test_report_errors_are_one_line_with_exit_codes(tmp_path, capsys):
    from traceanalyzer.cli import main

    cases = [
        (["--config", str(tmp_path / "missing.toml"), "-o", str(tmp_path / "r.html")], 3, "configuration file not found"),
        (["--rank", "5", "-o", str(tmp_path / "r.html")], 2, "no rank 5"),
        ([], 2, "-o"),
    ]
    for extra, code, msg in cases:
        assert main(["report", str(DEMO), *extra]) == code
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err
    assert not (tmp_path / "r.html").exists()
    # a real process: exit code 5 for a CPU-only trace, one line on stderr
    r = run_cli("report", FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz", "-o", tmp_path / "r.html")
    assert r.returncode == 5 and len(r.stderr.strip().splitlines()) == 1
    # json goes to stdout without -o, and is the model
    assert main(["report", str(DEMO), "--format", "json", "--rank", "0"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["timeline"]["rank"] == 0 and doc["reproduce"]["command"][:2] == ["traceanalyzer", "report"]
    assert "--rank" in doc["reproduce"]["command"]


def test_the_api_reads_the_run_configuration_and_fingerprints_the_inputs(tmp_path):
    """The report model reads no file: ``ta.report`` loads the run configuration and
    fingerprints the inputs; a model built without them records no input."""
    from traceanalyzer.errors import ConfigError

    with pytest.raises(ConfigError, match="no such run configuration file"):
        ta.report(DEMO, config=tmp_path / "missing.toml")
    assert report_model.build(ta.analyze(ta.load(DEMO)))["reproduce"]["inputs"] == []
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "a.parquet").write_bytes(b"12345")
    (tmp_path / "run.toml").write_bytes(b"x")
    got = input_fingerprints([tmp_path / "export", tmp_path / "gone.json"], tmp_path / "run.toml")
    assert got == [
        {"path": str(tmp_path / "export"), "role": "trace", "size_bytes": 5, "sha256": None},
        {"path": str(tmp_path / "gone.json"), "role": "trace", "size_bytes": None, "sha256": None},
        {"path": str(tmp_path / "run.toml"), "role": "config", "size_bytes": 1, "sha256": hashlib.sha256(b"x").hexdigest()},
    ]
    assert ta.report(DEMO).to_dict()["reproduce"]["inputs"][0]["sha256"] == hashlib.sha256(Path(DEMO).read_bytes()).hexdigest()

def test_chosen_rank_sets_the_timeline(tmp_path):
    m = _model(DLRM, rank=6)
    assert m["timeline"]["rank"] == 6
    assert len(m["timeline"]["steps"]) == 1
    total = sum(e - s for s, e in zip(m["timeline"]["runs"]["start_ms"], m["timeline"]["runs"]["end_ms"]))
    assert total == pytest.approx(m["ranks"][6]["step_ms"])


def test_more_timelines_hold_the_other_ranks_fastest_then_slowest_and_sum_to_their_partition():
    analysis = ta.analyze(ta.load(DLRM))
    m = report_model.build(analysis, rank=6)
    naive = _naive(analysis.steps.to_dicts())
    mean = {r: n["duration"] / n["steps"] for r, n in naive.items()}
    rest = [r for r in mean if r != 6]
    fastest = min(rest, key=lambda r: (mean[r], r))
    expected = [fastest, *sorted((r for r in rest if r != fastest), key=lambda r: (-mean[r], r))]
    assert [t["rank"] for t in m["more_timelines"]] == expected  # all 8 ranks: the chosen one, then 7 more
    assert fastest == 7 and expected[1] == 1  # rank 7 has the shortest step (12.509 ms), rank 1 the longest
    for t in m["more_timelines"]:
        runs = t["runs"]
        for b in BUCKETS:
            total = sum(e - s for s, e, k in zip(runs["start_ms"], runs["end_ms"], runs["bucket"]) if k == b)
            assert total == pytest.approx(naive[t["rank"]][b] / 1e6, abs=1e-9)
        assert [x["step"] for x in t["steps"]] == [10]


def test_more_timelines_stop_at_the_run_budget(monkeypatch):
    from traceanalyzer.views import timelines

    analysis = ta.analyze(ta.load(DLRM))
    full = report_model.build(analysis)
    sizes = [len(full["timeline"]["runs"]["step"]), *[len(t["runs"]["step"]) for t in full["more_timelines"]]]
    monkeypatch.setattr(timelines, "MAX_RUNS", sum(sizes[:3]))  # room for the chosen rank and two more
    m = report_model.build(analysis)
    assert [t["rank"] for t in m["more_timelines"]] == [t["rank"] for t in full["more_timelines"][:2]]
    monkeypatch.setattr(timelines, "MAX_RANKS", 1)
    assert report_model.build(analysis)["more_timelines"] == []


def test_report_steps_carry_exact_integer_start_ns():
    """Epoch-scale µs as a float is off by up to 0.25 µs; the report carries the exact integer ns
    beside it, equal to the partition's step start and to the timeline's window start."""
    analysis = ta.analyze(ta.load(DLRM))
    m = report_model.build(analysis, rank=0)
    want = dict(((r, s), t) for r, s, t in analysis.steps.select("rank", "step", "start_ns").iter_rows())
    assert {(x["rank"], x["step"]): x["start_ns"] for x in m["steps"]} == want
    assert all(isinstance(x["start_ns"], int) for x in m["steps"])
    import polars as pl

    w = dict(analysis.windows.filter(pl.col("rank") == 0).select("step", "wstart_ns").iter_rows())
    assert {x["step"]: x["start_ns"] for x in m["timeline"]["steps"]} == w


def test_mfu_is_a_percentage_everywhere_in_the_report(tmp_path):
    """One unit for MFU: the headline table shows the percentage the summary sentence states."""
    import re as _re

    cfg = ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml"
    md = _report(tmp_path, DEMO, "markdown", "-c", cfg).read_text()
    doc = orjson.loads(_report(tmp_path, DEMO, "json", "-c", cfg).read_bytes())
    mfu = doc["headline"]["mfu"]
    assert doc["headline"]["mfu_pct"] == pytest.approx(100 * mfu)
    said = _re.search(r"MFU (\d+\.\d)%", md).group(1)
    shown = _re.search(r"\| MFU \(% of peak\) \| (\d+\.\d) \|", md).group(1)
    assert said == shown == f"{100 * mfu:.1f}"
    assert "fraction of peak" not in md
