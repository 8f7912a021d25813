#!/usr/bin/env python
"""Build a large, realistic Kineto trace by tiling a real one in time.

    python scripts/make_big_trace.py --size 200MB -o /tmp/big_200MB.json
    python scripts/make_big_trace.py --size 1GB -o /tmp/big_1GB.json.gz    # gzip (level 1)

The source (default: ``../shared/traces/hta/df_index_resolver/df_index_resolver.json.gz``, 54 MB
of JSON, 5 training steps, one rank) is repeated back to back: copy ``k`` has every timestamp
shifted by ``k`` times the source's span (plus a 1 ms gap) and every id shifted so that nothing
collides across copies: ``External id`` / ``external id``, ``correlation``, ``Ev Idx``,
``Sequence number``, ``Python id`` / ``Python parent id``, flow ids (``id`` of ``s``/``f``/``t``
events) and the ``ProfilerStep#N`` numbers. Metadata (``ph == "M"``) events are written once.
The last copy holds only the source's earliest events (by start time, whole steps first) so the
output lands close to the requested size. Events are written one per line-opening ``{`` block as
Kineto does, so the file exercises the same code paths as a real trace.

Generated files belong in /tmp or another ignored folder: never commit them.
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

ID_ARGS = ("External id", "external id", "correlation", "Ev Idx", "Sequence number", "Python id", "Python parent id")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (use e.g. 50MB, 200MB, 1GB)")
    return int(float(m.group(1)) * UNITS[m.group(2).upper()])


def load(path: Path) -> dict:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return orjson.loads(data)


def id_spans(events: list[dict]) -> tuple[dict[str, int], int, int]:
    """Per id field, the shift one copy needs (max + 1); the flow-id shift; the step-number shift."""
    spans = {k: 0 for k in ID_ARGS}
    flow = 0
    steps = []
    for e in events:
        a = e.get("args")
        if isinstance(a, dict):
            for k in ID_ARGS:
                v = a.get(k)
                if isinstance(v, int) and not isinstance(v, bool) and v + 1 > spans[k]:
                    spans[k] = v + 1
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            flow = max(flow, e["id"] + 1)
        m = STEP.match(str(e.get("name", "")))
        if m:
            steps.append(int(m.group(1)))
    step_shift = (max(steps) - min(steps) + 1) if steps else 0
    # both spellings of the external id link the same ops and kernels: one shift for both
    spans["External id"] = spans["external id"] = max(spans["External id"], spans["external id"])
    spans["Python id"] = spans["Python parent id"] = max(spans["Python id"], spans["Python parent id"])
    return spans, flow, step_shift


def shifted(e: dict, k: int, dt: float, spans: dict[str, int], flow: int, step_shift: int) -> dict:
    if k == 0:
        return e
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = e["ts"] + k * dt
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        for key, span in spans.items():
            v = a.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                a[key] = v + k * span
        e["args"] = a
    if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
        e["id"] = e["id"] + k * flow
    m = STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_shift}"
    return e


def event_text(e: dict) -> bytes:
    # Kineto-like layout: each event opens with "  {" on its own line, "key": value pairs
    # separated by ", " (about the same bytes per event as the profiler writes)
    return b"  {\n    " + b", ".join(b'"' + k.encode() + b'": ' + orjson.dumps(v) for k, v in e.items()) + b"\n  }"


def build(source: Path, out: Path, size: int | None = None, copies: int | None = None) -> dict:
    """Write the tiled trace: ``copies`` whole copies, or as many events as fit in ``size`` bytes."""
    doc = load(source)
    events = doc["traceEvents"]
    meta_events = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    # the last, partial copy takes the earliest events: sort a copy by start time
    timed.sort(key=lambda e: e.get("ts", 0) if isinstance(e.get("ts"), (int, float)) else 0)
    ts = [e["ts"] for e in timed if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in timed if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]
    span = max(ends) - min(ts)
    dt = math.ceil(span) + 1000  # µs: copies never overlap, 1 ms apart
    spans, flow, step_shift = id_spans(timed)
    texts0 = [event_text(e) for e in timed]
    copy_bytes = sum(len(t) + 2 for t in texts0)
    opener = gzip.open(out, "wb", compresslevel=1) if out.name.endswith(".gz") else open(out, "wb")
    written = 0
    n_events = 0
    with opener as fh:
        def w(b: bytes) -> None:
            nonlocal written
            fh.write(b)
            written += len(b)

        w(b"{\n")
        for key, value in doc.items():
            if key == "traceEvents":
                continue
            if key in ("traceName", "displayTimeUnit", "baseTimeNanoseconds"):
                continue  # Kineto writes these after the events
            w(b'  "' + key.encode() + b'": ' + orjson.dumps(value) + b",\n")
        w(b'  "traceEvents": [\n')
        first = True
        for e in meta_events:
            w((b"" if first else b",\n") + event_text(e))
            first = False
            n_events += 1
        k = 0
        while (written + 200 < size) if copies is None else (k < copies):
            for i, e in enumerate(timed):
                text = texts0[i] if k == 0 else event_text(shifted(e, k, dt, spans, flow, step_shift))
                w((b"" if first else b",\n") + text)
                first = False
                n_events += 1
                if copies is None and written + 200 >= size and i > 0:
                    break
            k += 1
        w(b"\n  ]")
        for key in ("traceName", "displayTimeUnit", "baseTimeNanoseconds"):
            if key in doc:
                w(b',\n  "' + key.encode() + b'": ' + orjson.dumps(doc[key]))
        w(b"\n}\n")
    return {"out": str(out), "json_bytes": written, "events": n_events, "copies": k, "copy_bytes": copy_bytes, "shift_us": dt}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real Kineto trace to tile (.json or .json.gz)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--size", type=parse_size, help="target uncompressed JSON size, e.g. 50MB, 200MB, 1GB")
    what.add_argument("--copies", type=int, help="exactly this many whole copies of the source instead")
    ap.add_argument("-o", "--output", type=Path, required=True, help="output file (.json, or .json.gz for gzip level 1)")
    args = ap.parse_args(argv)
    if not args.source.exists():
        print(f"error: {args.source}: no such file (the shared traces live in ../shared/traces)", file=sys.stderr)
        return 3
    info = build(args.source, args.output, args.size, args.copies)
    print(orjson.dumps(info).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
