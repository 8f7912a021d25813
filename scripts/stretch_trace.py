#!/usr/bin/env python
"""Make a slower copy of a Kineto trace: every timestamp after a pivot is stretched.

    python scripts/stretch_trace.py IN.json.gz OUT.json.gz --factor 1.10 [--after 0.0]

Each event's start ``ts`` and end ``ts + dur`` are mapped by ``t -> t0 + (t - t0) * factor`` for
``t > t0``, where ``t0`` is the first event's start plus ``after`` × the trace's span (0 = stretch the
whole trace uniformly, so every step and every bucket gets ``factor`` times longer). Used by the
batch tests to build a run that is slower on purpose; a test-data generator, not product code.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import orjson


def stretch(src: str | Path, dst: str | Path, factor: float, after: float = 0.0) -> None:
    raw = Path(src).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    t0 = first + after * (last - first)

    def warp(t: float) -> float:
        return t if t <= t0 else t0 + (t - t0) * factor

    for e in timed:
        start, end = e["ts"], e["ts"] + (e.get("dur") or 0)
        new_start = warp(start)
        if isinstance(start, int):
            new_start = round(new_start)
        e["ts"] = new_start
        if "dur" in e:
            dur = warp(end) - new_start
            e["dur"] = round(dur) if isinstance(e["dur"], int) else dur
    out = orjson.dumps(doc)
    Path(dst).write_bytes(gzip.compress(out, 6) if str(dst).endswith(".gz") else out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--factor", type=float, default=1.10)
    ap.add_argument("--after", type=float, default=0.0, help="pivot as a fraction of the span (0 = start)")
    a = ap.parse_args()
    stretch(a.src, a.dst, a.factor, a.after)


if __name__ == "__main__":
    main()
