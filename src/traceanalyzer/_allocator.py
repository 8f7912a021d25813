"""The settings of polars' allocator (jemalloc) that traceanalyzer adds to ``_RJEM_MALLOC_CONF``.

Polars reads the variable when it is imported, after its own defaults: a setting the value names
overrides polars' own, and one the user named is never replaced. Two are added:

* ``narenas``: as many arenas as the process has polars threads (jemalloc's default is four per
  core). An arena keeps the pages freed in it for a while and the main thread and each polars
  thread allocate from their own, so memory freed by one query was not reused by the next one
  that ran on another thread: ~80 MiB less peak RSS on a 200 MB rank file with one arena;
* ``oversize_threshold:0``: allocations of 8 MiB and more (a rank's columns, the decoder's
  chunk buffers) come from the arenas like the others, rather than from a dedicated arena that
  returns them to the system at once and maps fresh pages for the next one: a 200 MB trace
  analysed in one process peaks 352-391 MiB instead of 392-416 MiB, in the same time
  (docs/performance.md, "Where the goals stand (2026-12-03)").
"""

from __future__ import annotations

#: what is added, unless the value names it already: ``{option: value}`` (``None``: the arenas,
#: whose number the caller gives)
ADDED = {"narenas": None, "oversize_threshold": "0"}


def jemalloc_conf(conf: str, arenas: int | None) -> str:
    """``conf`` (a ``_RJEM_MALLOC_CONF`` value, maybe empty) with the settings of :data:`ADDED`
    that it does not name: ``arenas`` arenas (at least one; None: as many as jemalloc makes)."""
    parts = [conf] if conf else []
    for option, value in ADDED.items():
        if option in conf or (value is None and arenas is None):
            continue
        parts.append(f"{option}:{max(1, arenas or 1) if value is None else value}")
    return ",".join(parts)
