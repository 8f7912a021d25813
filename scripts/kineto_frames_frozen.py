"""Write (or check) tests/data/kineto_frames_frozen.json: the frame every Kineto fixture parses
to, as decoded by the dict decoder (orjson + ``pl.from_dicts``, the decoder before the typed
one), so that any other decoder (the typed msgspec one, a compiled one) can be compared with it.

Per fixture: the number of rows, the schema, the sha256 of the frame written as CSV, the meta
and the warnings (the file's path replaced by ``<file>``).

Independent check, before anything is written: in every frame, the number of kernel, memcpy
and memset events and their summed duration in ns equal a plain-Python walk over the raw JSON
(``"ph": "X"`` events by category, ``dur`` read as a decimal); the script refuses to write
digests of a frame that fails it.

    python scripts/kineto_frames_frozen.py           # rewrite the file
    python scripts/kineto_frames_frozen.py --check   # exit 1 if the file differs from today's frames
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from decimal import Decimal
from pathlib import Path

import orjson
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
if __name__ == "__main__":  # run as a script: the checkout's package. Imported (by the tests), the
    sys.path.insert(0, str(SRC))  # importer's sys.path is left alone: processes it spawns inherit it

from traceanalyzer.parsers import kineto  # noqa: E402

OUT = ROOT / "tests" / "data" / "kineto_frames_frozen.json"
#: the fixtures with a frozen frame (the MTIA cut has categories of its own; not frozen)
FIXTURES = sorted(p for p in (ROOT / "fixtures" / "kineto").rglob("*.json.gz") if "mtia" not in p.name)
GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}


def dict_decoder_frame(path: Path):
    """``kineto.parse_file`` with the typed decoder switched off: every chunk goes through the
    dict decoder, as before the typed one existed."""
    typed = kineto.decode_typed
    kineto.decode_typed = lambda piece: None
    try:
        return kineto.parse_file(path)
    finally:
        kineto.decode_typed = typed


def digest(path: Path, parsed=None) -> dict:
    df, meta, warns = parsed or kineto.parse_file(path)
    return {
        "rows": df.height,
        "schema": [f"{k}:{v}" for k, v in df.schema.items()],
        "csv_sha256": hashlib.sha256(df.write_csv().encode()).hexdigest(),
        "meta": {k: v for k, v in meta.items() if k != "file"},
        "warnings": [w.replace(str(path), "<file>") for w in warns],
    }


def plain_gpu_counts(path: Path) -> dict[str, tuple[int, int]]:
    doc = orjson.loads(gzip.open(path).read())
    out: dict[str, list[int]] = {}
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        kind = GPU.get(str(e.get("cat", "")).lower())
        if e.get("ph") == "X" and kind:
            c = out.setdefault(kind, [0, 0])
            c[0] += 1
            c[1] += int(Decimal(str(e["dur"])) * 1000)
    return {k: tuple(v) for k, v in out.items()}


def frame_gpu_counts(df: pl.DataFrame) -> dict[str, tuple[int, int]]:
    gpu = df.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    return {k: (n, d) for k, n, d in gpu.group_by("kind").agg(pl.len(), (pl.col("end_ns") - pl.col("start_ns")).sum()).rows()}


def build() -> dict:
    out = {}
    for path in FIXTURES:
        parsed = dict_decoder_frame(path)
        want, got = plain_gpu_counts(path), frame_gpu_counts(parsed[0])
        if want != got:
            raise SystemExit(f"{path}: the frame's GPU events {got} differ from the raw JSON's {want}: not written")
        out[str(path.relative_to(ROOT))] = digest(path, parsed)
    return out


def main(argv: list[str]) -> int:
    frozen = build()
    if "--check" in argv:
        same = json.loads(OUT.read_text()) == frozen
        print("kineto_frames_frozen.json is current" if same else "kineto_frames_frozen.json differs from today's frames")
        return 0 if same else 1
    OUT.write_text(json.dumps(frozen, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(frozen)} fixtures")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
