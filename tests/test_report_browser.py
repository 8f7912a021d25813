"""The HTML report in a real headless browser (Chromium): it loads with no error, fetches nothing,
and every plot decodes to an image with a non-zero size. Skips when no Chromium is installed
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

from conftest import DLRM

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

# Injected into a copy of the report only: the report itself has no script at all.
PROBE_HEAD = """<script>
window.__errs = [];
window.addEventListener('error', function (e) {
  var t = e.target;
  window.__errs.push(t && t.tagName ? ('failed to load <' + t.tagName + '>') : String(e.message));
}, true);
</script>"""
PROBE_BODY = """<script>
window.addEventListener('load', function () {
  var out = {imgs: [], errors: window.__errs,
             resources: performance.getEntriesByType('resource').map(function (r) { return r.name.slice(0, 80); })};
  document.querySelectorAll('img').forEach(function (im) {
    var r = im.getBoundingClientRect();
    out.imgs.push({w: im.naturalWidth, h: im.naturalHeight, complete: im.complete, shown_w: r.width, shown_h: r.height});
  });
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


def test_html_report_renders_in_headless_chromium(tmp_path):
    report = tmp_path / "report.html"
    assert main(["report", str(DLRM), "-o", str(report)]) == 0
    page = report.read_text()
    n_imgs = page.count("<img ")
    assert n_imgs == 3

    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</title>", "</title>" + PROBE_HEAD, 1).replace("</body>", PROBE_BODY + "</body>", 1))
    r = _chromium(tmp_path, "--dump-dom", probe.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, "the page's load event never fired (no probe in the dumped DOM):\n" + r.stderr[-2000:]
    result = json.loads(html.unescape(m.group(1)))
    assert result["errors"] == []
    assert result["resources"] == []  # fetched nothing: every image is a data: URI
    assert len(result["imgs"]) == n_imgs
    for im in result["imgs"]:
        assert im["complete"] and im["w"] > 200 and im["h"] > 100, im
        assert im["shown_w"] > 0 and im["shown_h"] > 0, im
    assert _console_errors(r.stderr) == []
    assert "traceanalyzer report" in r.stdout and "Top exposed collectives" in r.stdout

    # the report itself (no probe) as a screenshot: not blank, and the plot colours are there
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", report.as_uri())
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    assert _console_errors(r.stderr) == []
    im = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert im.size == (1280, 2400)
    colours = im.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # text, tables and plots, not a blank page
    present = {c for _n, c in colours}
    for hex_colour in ("#0072B2", "#D55E00", "#999999"):  # compute, exposed comm, idle bars
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, hex_colour
