"""The profiler's own options from a Kineto trace's header (the keys before ``traceEvents``).

``torch.profiler.profile(record_shapes=..., profile_memory=..., with_stack=..., with_flops=...)``
writes each option that was on as a top-level key (``"record_shapes": 1``) ahead of the events;
only that head of the file is read (decompressed as far as needed, at most :data:`HEAD_BYTES`).
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from traceanalyzer.schema import COSTLY_PROFILER_OPTIONS

#: options that add host work to every op (shapes and stacks recorded, allocations tracked)
COSTLY = COSTLY_PROFILER_OPTIONS
OPTIONS = (*COSTLY, "with_flops", "with_modules")
HEAD_BYTES = 1 << 16
_KEY = re.compile(rb'"(' + b"|".join(o.encode() for o in OPTIONS) + rb')"\s*:\s*(1|true)\b')


def profiler_options(path: str | Path) -> list[str]:
    """The profiler options that were on (names from :data:`OPTIONS`, in that order); an empty
    list for a file that is not a readable Kineto JSON trace (nsys, unreadable, no header)."""
    p = Path(path)
    if not p.name.endswith((".json", ".json.gz")):
        return []
    try:
        opener = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except (OSError, EOFError):
        return []
    head = head.split(b'"traceEvents"', 1)[0]
    found = {m.group(1).decode() for m in _KEY.finditer(head)}
    return [o for o in OPTIONS if o in found]
