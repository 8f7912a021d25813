"""How the package runs its polars queries: which of polars' engines, chosen by size.

Polars 2 made its streaming engine the default for ``LazyFrame.collect()``. The package's queries
are many small plans (a few hundred per rank); on a rank of up to some hundred thousand events
the streaming engine costs up to twice the CPU of the in-memory engine for the same result, while
on larger ranks it costs no more CPU and holds less memory (measured in docs/performance.md,
"Polars' engine"). So every query of the package names its engine (``collect(engine=
query_engine())``): the in-memory engine, or the streaming engine while a large rank is
classified (:func:`sized`). The choice is per call: a caller's own polars configuration
(``pl.Config.set_engine_affinity``) is neither read nor changed.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

#: the engine of every query outside a large rank's classification
ENGINE = "in-memory"
#: from this many events, a rank's classification runs on polars' streaming engine: there it
#: costs no more CPU than the in-memory engine and peaks lower (200 MB of JSON, 515,000 events:
#: 1.40x the JSON against 1.57x); below it the in-memory engine is up to twice as fast
LARGE_EVENTS = 300_000

_ENGINE: contextvars.ContextVar[str] = contextvars.ContextVar("traceanalyzer_polars_engine", default=ENGINE)


def query_engine() -> str:
    """The engine for a query now: :data:`ENGINE`, or ``"streaming"`` inside :func:`sized` for a
    large frame."""
    return _ENGINE.get()


@contextlib.contextmanager
def sized(events: int) -> Iterator[str]:
    """The queries run in this block (this thread or task) are over frames of ``events`` rows:
    the streaming engine from :data:`LARGE_EVENTS` on, else :data:`ENGINE`."""
    token = _ENGINE.set("streaming" if events >= LARGE_EVENTS else ENGINE)
    try:
        yield _ENGINE.get()
    finally:
        _ENGINE.reset(token)
