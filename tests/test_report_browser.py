"""The HTML report in a real headless browser (Chromium): it loads with no error, fetches nothing,
every plot is drawn; its tables sort and filter, its plots answer the pointer, its rank selector
switches the shown timeline; and with JavaScript off every table and plot is still there. Skips when no Chromium is installed
(CI installs Debian's ``chromium``, see ``.ci/run``)."""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess

import pytest
from PIL import Image

from traceanalyzer.cli import main

from conftest import DEMO, DLRM, TRACES

CANDIDATES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]


def _browser() -> str | None:
    env = os.environ.get("TRACEANALYZER_CHROMIUM")
    if env:
        return env if shutil.which(env) or os.path.isfile(env) else None
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER = _browser()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium binary found (looked for " + ", ".join(CANDIDATES) + " on PATH and $TRACEANALYZER_CHROMIUM); "
    "install Debian's `chromium` package to run the headless-browser test",
)

# Injected into a copy of the report only (the report's own script is the one inline <script>).
PROBE_HEAD = """<script>
window.__errs = [];
window.addEventListener('error', function (e) {
  var t = e.target;
  window.__errs.push(t && t.tagName ? ('failed to load <' + t.tagName + '>') : String(e.message));
}, true);
</script>"""
PROBE_BODY = """<script>
window.addEventListener('load', function () {
  var out = {plots: [], errors: window.__errs,
             resources: performance.getEntriesByType('resource').map(function (r) { return r.name.slice(0, 80); })};
  document.querySelectorAll('svg.plot').forEach(function (s) {
    var r = s.getBoundingClientRect();
    out.plots.push({id: s.id, shown_w: r.width, shown_h: r.height});
  });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
# Drives the page as a user would (clicks, typing, the selector) and writes what it then shows.
INTERACT = """<script>
window.addEventListener('load', function () {
  function col(tableId, name) {
    var ths = document.querySelectorAll('#' + tableId + ' thead th');
    for (var i = 0; i < ths.length; i++) if (ths[i].textContent === name) return i;
    return -1;
  }
  function column(tableId, i) {
    return Array.prototype.map.call(document.querySelectorAll('#' + tableId + ' tbody tr'), function (tr) {
      return tr.cells[i].textContent; });
  }
  function click(tableId, name) {
    document.querySelectorAll('#' + tableId + ' thead th')[col(tableId, name)].querySelector('button').click();
  }
  var out = {js: document.documentElement.classList.contains('js')};
  // sort the ranks table by idle ms (twice: descending, then ascending), the kernels by name
  click('ranks', 'idle ms');
  out.idle_desc = column('ranks', col('ranks', 'rank'));
  out.idle_desc_sort = document.querySelectorAll('#ranks thead th')[col('ranks', 'idle ms')].getAttribute('aria-sort');
  click('ranks', 'idle ms');
  out.idle_asc = column('ranks', col('ranks', 'rank'));
  click('kernels', 'kernel');
  out.kernels_by_name = Array.prototype.map.call(document.querySelectorAll('#kernels tbody tr'), function (tr) {
    return tr.cells[0].getAttribute('title') || tr.cells[0].textContent; });
  // filter the kernels: the rows left shown
  var box = document.querySelector('input[aria-label="filter the rows of kernels"]');
  box.value = 'NCCL';
  box.dispatchEvent(new Event('input'));
  out.filtered = Array.prototype.filter.call(document.querySelectorAll('#kernels tbody tr'), function (tr) { return !tr.hidden; })
    .map(function (tr) { return tr.cells[0].getAttribute('title') || tr.cells[0].textContent; });
  out.filter_count = box.parentNode.querySelector('.count').textContent;
  // hover: what the pointer finds at the middle of rank 0's first partition bar, and the titles of every mark
  var bar = document.querySelector('#plot-partition rect[data-key]');
  var r = bar.getBoundingClientRect();
  var hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  out.hit = hit && hit.querySelector('title') ? hit.querySelector('title').textContent : null;
  out.untitled = 0;
  document.querySelectorAll('svg.plot rect[data-key], svg.plot g[data-key]').forEach(function (m) {
    if (!m.querySelector(':scope > title')) out.untitled += 1; });
  out.marks = document.querySelectorAll('svg.plot rect[data-key], svg.plot g[data-key]').length;
  // the rank selector of the timeline
  var sel = document.querySelector('#timeline ~ .panels select, .panels[data-label=rank] select');
  out.options = Array.prototype.map.call(sel.options, function (o) { return o.value; });
  function visible() {
    return Array.prototype.filter.call(document.querySelectorAll('svg.plot'), function (s) { return s.getBoundingClientRect().height > 0; })
      .map(function (s) { return s.id; }).filter(function (id) { return id.indexOf('plot-timeline') === 0; });
  }
  out.shown_before = visible();
  sel.value = '7';
  sel.dispatchEvent(new Event('change'));
  out.shown_after = visible();
  out.table_after = Array.prototype.filter.call(document.querySelectorAll('table[id^=timeline-steps]'), function (t) {
    return t.getBoundingClientRect().height > 0; }).map(function (t) { return t.id; });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing could load from the network anyway
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
    "--window-size=1280,2400",
]


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    return subprocess.run(
        [BROWSER, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "HOME": str(tmp_path)},
    )


def _console_errors(stderr: str) -> list[str]:
    """Page console messages and load failures from Chromium's log (dbus/gpu noise ignored)."""
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line or "net::ERR_" in line]


@pytest.fixture(scope="module")
def dlrm_report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    assert main(["report", str(DLRM), "-q", "-o", str(d / "report.html")]) == 0
    assert main(["report", str(DLRM), "-q", "-f", "json", "-o", str(d / "report.json")]) == 0
    return d / "report.html", json.loads((d / "report.json").read_text())


def _probe(tmp_path, page: str, probe: str, *flags: str) -> dict:
    path = tmp_path / "probe.html"
    path.write_text(page.replace("</title>", "</title>" + PROBE_HEAD, 1).replace("</body>", probe + "</body>", 1))
    r = _chromium(tmp_path, *flags, "--dump-dom", path.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, "the page's load event never fired (no probe in the dumped DOM):\n" + r.stderr[-2000:]
    assert _console_errors(r.stderr) == []
    return json.loads(html.unescape(m.group(1)))


def test_html_report_renders_in_headless_chromium(tmp_path, dlrm_report):
    report, doc = dlrm_report
    page = report.read_text()
    assert len(page.encode()) < 2_000_000  # the 8-rank job's report stays small enough to attach
    timeline_ranks = [doc["timeline"]["rank"], *[t["rank"] for t in doc["more_timelines"]]]
    assert len(timeline_ranks) == 8
    result = _probe(tmp_path, page, PROBE_BODY)
    assert result["errors"] == []
    assert result["resources"] == []  # fetched nothing
    # one wait-matrix heatmap per collective and group of the model (who waited on whom)
    waits = [f"plot-waits-{m['collective']}-{m['group']}" for m in doc["straggler_costs"]["wait_matrix"]]
    assert len(waits) == 2
    assert [p["id"] for p in result["plots"]] == ["plot-partition", *[f"plot-timeline-rank-{r}" for r in timeline_ranks], "plot-heatmap",
                                                  *waits]
    shown = [p for p in result["plots"] if p["shown_h"] > 0]
    # the selector shows one rank's timeline at a time: the default (slowest) rank's
    assert [p["id"] for p in shown] == ["plot-partition", f"plot-timeline-rank-{doc['headline']['slowest_rank']}", "plot-heatmap", *waits]
    for p in shown:
        assert p["shown_w"] > 300 and p["shown_h"] > 100, p

    # the report itself (no probe) as a screenshot: not blank, and the plot colours are there
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", report.as_uri())
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    assert _console_errors(r.stderr) == []
    _assert_plot_colours(shot)


def _assert_plot_colours(shot) -> None:
    im = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert im.size == (1280, 2400)
    colours = im.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, tables and plots, not a blank page
    present = {c for _n, c in colours}
    for hex_colour in ("#0072B2", "#D55E00", "#999999"):  # compute, exposed comm, idle bars
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, hex_colour


def test_tables_sort_and_filter_plots_hover_and_the_rank_selector_switches(tmp_path, dlrm_report):
    report, doc = dlrm_report
    out = _probe(tmp_path, report.read_text(), INTERACT)
    assert out["js"] is True
    # a click on "idle ms" sorts the ranks by idle time, most first; a second click reverses
    by_idle = sorted(doc["ranks"], key=lambda r: -round(r["buckets"]["idle"]["ms"], 3))
    assert out["idle_desc"] == [str(r["rank"]) for r in by_idle]
    assert out["idle_desc_sort"] == "descending"
    assert out["idle_asc"] == [str(r["rank"]) for r in sorted(doc["ranks"], key=lambda r: round(r["buckets"]["idle"]["ms"], 3))]
    assert out["idle_desc"] != [str(r["rank"]) for r in doc["ranks"]]  # the order did change
    # text columns sort A to Z (case-insensitive, by the full name where it is shortened)
    names = [k["name"] for k in doc["kernels"]["rows"]]
    assert sorted(out["kernels_by_name"]) == sorted(names)
    assert out["kernels_by_name"] == sorted(names, key=str.lower)
    # the filter keeps the rows whose name holds the text, in any case
    nccl = [n for n in names if "nccl" in n.lower()]
    assert 0 < len(nccl) < len(names)
    assert sorted(out["filtered"]) == sorted(nccl)
    assert out["filter_count"] == f"{len(nccl)} of {len(names)} rows"
    # hover: the pointer over rank 0's compute bar finds a mark whose title is rank 0's compute time
    r0 = doc["ranks"][0]
    assert out["hit"] == (f"rank {r0['rank']} · compute: {r0['buckets']['compute']['ms']:.3f} ms per step "
                          f"({r0['buckets']['compute']['pct']:.1f}% of the step)")
    assert out["marks"] > 8 * 5 * 2 and out["untitled"] == 0  # every bar, cell and span group has a hover text
    # the rank selector: the model's timeline ranks, the slowest first; choosing rank 7 shows its timeline and table only
    ranks = [doc["timeline"]["rank"], *[t["rank"] for t in doc["more_timelines"]]]
    assert out["options"] == [str(r) for r in ranks]
    assert out["shown_before"] == [f"plot-timeline-rank-{ranks[0]}"]
    assert out["shown_after"] == ["plot-timeline-rank-7"]
    assert out["table_after"] == ["timeline-steps-rank-7"]


NOSCRIPT_PROBE = """<script>
window.addEventListener('load', function () {
  function shown(e) { var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; }
  var out = {errors: window.__errs, js: document.documentElement.classList.contains('js'),
             tools: document.querySelectorAll('.tools').length,
             tables: Array.prototype.filter.call(document.querySelectorAll('table.data'), shown).map(function (t) { return t.id; }),
             rows: Array.prototype.filter.call(document.querySelectorAll('table.data tbody tr'), shown).length,
             plots: Array.prototype.filter.call(document.querySelectorAll('svg.plot'), shown).map(function (s) { return s.id; }),
             names: Array.prototype.filter.call(document.querySelectorAll('.panel-name'), shown).map(function (p) { return p.textContent; })};
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_without_javascript_every_table_and_plot_is_there(tmp_path, dlrm_report):
    report, doc = dlrm_report
    page = report.read_text()
    # the page without its script (as a browser with JavaScript off shows it), measured by a probe
    scripts = re.findall(r"<script>.*?</script>", page, re.S)
    assert len(scripts) == 1
    out = _probe(tmp_path, page.replace(scripts[0], ""), NOSCRIPT_PROBE)
    assert out["errors"] == [] and out["js"] is False and out["tools"] == 0
    tables = re.findall(r'<table class="data" id="([^"]+)"', page)
    assert {"ranks", "kernels", "timeline-steps", "top-exposed-collectives"} <= set(tables)
    assert out["tables"] == tables  # every table laid out, none hidden
    assert out["rows"] == page.count("<tr>") - len(tables)  # every body row (one header row per table)
    timelines = [doc["timeline"], *doc["more_timelines"]]
    waits = [f"plot-waits-{m['collective']}-{m['group']}" for m in doc["straggler_costs"]["wait_matrix"]]
    assert out["plots"] == ["plot-partition", *[f"plot-timeline-rank-{t['rank']}" for t in timelines], "plot-heatmap", *waits]
    assert [n.split(" (")[0] for n in out["names"]] == [f"rank {t['rank']}" for t in timelines]
    # and in a browser that refuses to run the page's script (a Content-Security-Policy of
    # script-src 'none': headless Chromium's own switch for it stops --dump-dom and --screenshot too)
    blocked = tmp_path / "blocked.html"
    blocked.write_text(page.replace('<meta charset="utf-8">', '<meta charset="utf-8">'
                                    """<meta http-equiv="Content-Security-Policy" content="script-src 'none'">""", 1))
    r = _chromium(tmp_path, "--dump-dom", blocked.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "violates the following Content Security Policy" in r.stderr  # the script was refused
    assert '<html lang="en">' in r.stdout and 'class="tools"' not in r.stdout
    assert re.findall(r'<table class="data" id="([^"]+)"', r.stdout) == tables
    assert r.stdout.count('<svg class="plot"') == len(out["plots"])
    shot = tmp_path / "shot-nojs.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", blocked.as_uri())
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    _assert_plot_colours(shot)


STEP_PROBE = """<script>
window.addEventListener('load', function () {
  function shown(sel) {
    return Array.prototype.filter.call(document.querySelectorAll(sel), function (e) { return e.getBoundingClientRect().height > 0; })
      .map(function (e) { return e.id; });
  }
  var sel = document.querySelector('.panels[data-label=step] select');
  var out = {options: Array.prototype.map.call(sel.options, function (o) { return o.textContent; }),
             before: shown('svg.plot[id^=plot-partition]'), tables_before: shown('#partition ~ .panels table, .panels[data-label=step] table')};
  sel.selectedIndex = 2;
  sel.dispatchEvent(new Event('change'));
  out.after = shown('svg.plot[id^=plot-partition]');
  out.tables_after = shown('.panels[data-label=step] table');
  var bar = document.querySelector('#' + out.after[0] + ' rect[data-key=idle]');
  out.idle_title = bar ? bar.querySelector('title').textContent : null;
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_the_step_selector_switches_the_partition_shown(tmp_path):
    """A single-rank trace of 3 steps: the partition section offers the mean and each step."""
    assert main(["report", str(DEMO), "-q", "-o", str(tmp_path / "r.html")]) == 0
    assert main(["report", str(DEMO), "-q", "-f", "json", "-o", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    steps = [s["step"] for s in doc["steps"]]
    assert len(steps) == 3
    out = _probe(tmp_path, (tmp_path / "r.html").read_text(), STEP_PROBE)
    assert out["options"] == ["mean over the steps", *[f"step {s}" for s in steps]]
    assert out["before"] == ["plot-partition"] and out["tables_before"] == ["ranks"]
    assert out["after"] == [f"plot-partition-step-{steps[1]}"] and out["tables_after"] == [f"step-{steps[1]}-ranks"]
    s = doc["steps"][1]
    assert out["idle_title"] == f"rank {s['rank']} · step {s['step']} · idle: {s['idle_ms']:.3f} ms of {s['duration_ms']:.3f} ms"


# Every table's width against its container and the viewport, with every panel laid out (the
# page without its script shows each rank's and step's view one after another).
FIT_PROBE = """<script>
window.addEventListener('load', function () {
  var vw = document.documentElement.clientWidth, out = {viewport: vw, page: document.documentElement.scrollWidth, tables: []};
  document.querySelectorAll('table.data').forEach(function (t) {
    var box = t.parentNode, r = t.getBoundingClientRect();
    out.tables.push({id: t.id, width: t.scrollWidth, shown: r.width > 0 && r.height > 0, right: r.right,
                     box: box.clientWidth, box_scroll: box.scrollWidth,
                     cells: Array.prototype.filter.call(t.querySelectorAll('td, th'), function (c) {
                       return c.scrollWidth > c.clientWidth + 1; }).length});
  });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""

H200_SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"


@pytest.mark.parametrize("which", ["dlrm-8rank", "h200-small"])
def test_every_table_fits_a_1400_px_window(tmp_path, dlrm_report, which):
    """At 1,400 px no table is cut or scrolls sideways: long cells wrap, kernel names are shortened
    (the full name on hover), numbers stay on one line; checked on every table, each rank's and
    step's included (the page without its script lays every panel out)."""
    if which == "dlrm-8rank":
        report = dlrm_report[0]
    else:
        if not H200_SMALL.exists():
            pytest.skip(f"shared traces not found at {H200_SMALL}")
        report = tmp_path / "h200.html"
        assert main(["report", str(H200_SMALL), "-q", "-o", str(report)]) == 0
    page = report.read_text()
    (script,) = re.findall(r"<script>.*?</script>", page, re.S)
    out = _probe(tmp_path, page.replace(script, ""), FIT_PROBE, "--window-size=1400,2400")
    assert out["viewport"] >= 1380  # 1,400 px less a scroll bar
    assert out["page"] <= out["viewport"]  # nothing sticks out of the page
    tables = re.findall(r'<table class="data" id="([^"]+)"', page)
    assert [t["id"] for t in out["tables"]] == tables and "kernels" in tables
    for t in out["tables"]:
        assert t["shown"], t
        assert t["width"] <= t["box"] and t["box_scroll"] <= t["box"], t  # no sideways scroll inside its box
        assert t["right"] <= out["viewport"], t
        assert t["cells"] == 0, t  # no cell's text runs past its border
