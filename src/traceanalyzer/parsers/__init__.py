"""Parsers: files on disk -> one :class:`~traceanalyzer.schema.Trace` per job.

Public surface: :func:`load` (a file or a directory of rank files) and :func:`discover`, from
:mod:`traceanalyzer.parsers.traces`. They load on first use, so that what needs only a small
part of this package (the decoder's name for ``--version``) does not import polars.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceanalyzer.parsers.traces import (
        RUN_MANIFEST,
        TRACE_SUFFIXES,
        discover,
        load,
        load_cached,
        one_profiler,
        profiler_files,
    )

__all__ = ["RUN_MANIFEST", "TRACE_SUFFIXES", "discover", "load", "load_cached", "one_profiler", "profiler_files"]


def __getattr__(name: str) -> Any:
    """A submodule (``from traceanalyzer.parsers import kineto``) or a name of
    :mod:`traceanalyzer.parsers.traces`, imported when first asked for."""
    if name.startswith("__"):
        raise AttributeError(name)
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    traces = importlib.import_module(f"{__name__}.traces")
    try:
        value = getattr(traces, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value
