"""Which files of a run directory are traces.

A real run directory holds more than its rank traces: ``config.json``, ``metrics.json``,
``trainer_state.json``, a ground truth, logs and checkpoints. A directory's rank files are the
files named like traces whose head says they are one; the others are *skipped*, each with one
warning line naming it. A file named on the command line is never skipped: it is read, and a
file that is not a trace is an error naming it (exit 4).

Only the head of a file is read (at most :data:`HEAD_BYTES`, inflated for gzip): a Kineto trace
names ``traceEvents`` in its first kilobytes (after ``deviceProperties``).
"""

from __future__ import annotations

import zlib
from pathlib import Path

#: bytes read (after inflating) to tell a trace from another JSON document
HEAD_BYTES = 1 << 20
#: skipped files named one per line in a warning; the rest are counted on one more line
MAX_NAMED = 5


def head(path: Path, limit: int = HEAD_BYTES) -> tuple[bytes, bool] | None:
    """(the first ``limit`` bytes of the file, inflated when it is gzip; whether that is the
    whole content), or None when it cannot be read or inflated (the parser then says why)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
            if raw[:2] != b"\x1f\x8b":
                return raw[:limit], len(raw) <= limit
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out, buf = b"", raw
            while True:
                out += d.decompress(buf, limit + 1 - len(out))
                if len(out) > limit or d.eof:
                    break
                buf = d.unconsumed_tail or fh.read(1 << 16)
                if not buf:
                    break
            return out[:limit], d.eof and len(out) <= limit
    except (OSError, zlib.error):
        return None


def not_a_trace(path: Path) -> str | None:
    """Why the JSON file ``path`` is not a trace (for a warning), or None when it is one, may be
    one, or is damaged (a damaged trace is the parser's to report, never skipped)."""
    name = path.name.lower()
    if not name.endswith((".json", ".json.gz")):
        return None
    got = head(path)
    if got is None:
        return None
    data, whole = got
    if b'"traceEvents"' in data:
        return None
    text = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return None  # an empty file: an unfinished trace, the parser says so
    if whole:
        import orjson

        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None  # damaged: a truncated trace is recovered or refused by the parser
        if isinstance(doc, dict):
            return "a JSON document without 'traceEvents' (not a trace)"
        if isinstance(doc, list) and not any(isinstance(e, dict) and "ph" in e for e in doc[:1000]):
            return "a JSON array without trace events (not a trace)"
        if not isinstance(doc, (dict, list)):
            return "a JSON value that is not a trace"
        return None
    if text[:1] == b"{" and b'"ph"' not in data:
        return f"a JSON document with no 'traceEvents' in its first {HEAD_BYTES >> 20} MiB (not a trace)"
    return None


def skip_lines(directory: Path, skipped: list[tuple[Path, str]]) -> list[str]:
    """One warning line per skipped file (at most :data:`MAX_NAMED`, then one line counting the rest)."""
    lines = [f"{p}: {why}: skipped" for p, why in skipped[:MAX_NAMED]]
    if len(skipped) > MAX_NAMED:
        lines.append(f"{directory}: {len(skipped) - MAX_NAMED} more file(s) that are not traces skipped")
    return lines
