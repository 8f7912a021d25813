"""Redraw the pictures the README and docs/guide.md show, from the bundled fixtures.

    python scripts/make_screenshots.py            # writes docs/img/*.svg and docs/img/report.png

The terminal pictures are the command's own output (colours included) drawn as SVG by rich;
the report picture is the HTML report rendered by a headless Chromium (skipped with a note
when none is installed). Run it after a change to what `breakdown` or `report` print.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"  # the package's source tree (src layout)
IMG = ROOT / "docs" / "img"
FIXTURE = "fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz"
RANKS = "fixtures/kineto/dlrm-v100-8rank"


def _terminal(args: list[str], width: int = 100) -> str:
    env = dict(os.environ, FORCE_COLOR="1", COLUMNS=str(width), TERM="xterm-256color", PYTHONPATH=str(SRC))
    env.pop("NO_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "traceanalyzer", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout


def _svg(name: str, title: str, args: list[str], width: int = 100) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=width, force_terminal=True, file=open(os.devnull, "w"))
    console.print(Text.from_ansi(_terminal(args, width)))
    console.save_svg(str(IMG / name), title=title)
    print(f"wrote docs/img/{name}")


def _report_png() -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        print("no headless Chromium: docs/img/report.png left as it is")
        return
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        raw = Path(tmp) / "raw.png"
        subprocess.run([sys.executable, "-m", "traceanalyzer", "report", RANKS, "-q", "-o", str(html)],
                       cwd=ROOT, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(SRC)))
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1100,1400", f"--screenshot={raw}", html.as_uri()],
                       check=True, capture_output=True)
        from PIL import Image

        # a palette PNG keeps the picture small enough to commit (octree: the small legend swatches keep their colours)
        Image.open(raw).convert("RGB").quantize(colors=64, method=Image.Quantize.FASTOCTREE).save(IMG / "report.png", optimize=True)
    print("wrote docs/img/report.png")


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    _svg("breakdown.svg", "traceanalyzer breakdown", ["breakdown", FIXTURE, "-q"])
    _svg("breakdown-detail.svg", "traceanalyzer breakdown --detail", ["breakdown", RANKS, "--detail", "-q"], 104)
    _report_png()


if __name__ == "__main__":
    main()
