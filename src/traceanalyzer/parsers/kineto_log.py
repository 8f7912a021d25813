"""The profiler's own log in a trace: where it says it lost activity records.

Kineto writes the messages it logged while tracing as top-level keys of the trace
(``"INFO"``, ``"WARNING"``, ``"ERROR"``: lists of lines such as ``"WARNING:... CuptiActivityApi.cpp:...]
Dropped 1024 activity records"``). A line of the ``WARNING`` or ``ERROR`` keys that says records
were dropped, a buffer overflowed or ran out, or tracing stopped early is returned as a warning
that begins with the file and contains :data:`traceanalyzer.schema.LOST_RECORDS`; the integrity check
``activity_buffers`` reads those warnings. The Nsight Systems reader passes the texts of its
export's ``DIAGNOSTIC_EVENT`` table the same way.
"""

from __future__ import annotations

import re
from pathlib import Path

from traceanalyzer.schema import LOST_RECORDS  # every warning of this module contains it

_LOST = re.compile(r"(?i)dropp?ed|overflow|exceeded max .*buffer|buffer.*(full|exhausted)|stopped early|terminating tracing")


def lost_records(doc: dict, path: Path | str) -> list[str]:
    """One warning (at most) for the lines of ``doc``'s ``WARNING`` / ``ERROR`` keys that say
    records were lost, quoting the first of them."""
    lines = []
    for key in ("WARNING", "ERROR"):
        v = doc.get(key)
        for line in (v if isinstance(v, list) else [v] if isinstance(v, str) else []):
            if isinstance(line, str) and _LOST.search(line):
                lines.append(" ".join(line.split()))
    if not lines:
        return []
    more = f" (and {len(lines) - 1} more such lines)" if len(lines) > 1 else ""
    return [f"{path}: {LOST_RECORDS}: {lines[0][:200]!r}{more}: kernels it dropped read as idle GPU time"]
