"""The background process of the training-loop handler: ``python -m traceanalyzer.integrations.worker``.

It reads one JSON job per line on stdin (a trace to analyse and where to store it), analyses
the traces one at a time in order, and answers one JSON line per job on stdout: ``{"ok": true,
"summary": {...}}`` (:func:`traceanalyzer.api.loop.store_trace`'s summary, with ``kept`` and
``keep_reason``) or ``{"ok": false, "error": "..."}`` when even the status row could not be
written. The first line is its settings (``keep``, the anomaly thresholds). A trace that is not
kept is deleted here, after its rows are stored. A job with ``failure`` set (the handler's,
for a trace whose worker died) stores that failure as the trace's status row. It runs at a lower priority than training
(``nice`` +5) and, unless ``POLARS_MAX_THREADS`` is set, on two polars threads.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def _answer(out, doc: dict) -> None:
    out.write(json.dumps(doc, default=str) + "\n")
    out.flush()


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # anything printed by accident must not break the protocol
    try:
        os.nice(5)
    except OSError:
        pass
    settings = json.loads(sys.stdin.readline() or "{}")
    from traceanalyzer.api.loop import store_trace
    from traceanalyzer.integrations.anomaly import KeepAnomalous

    keep = None
    if settings.get("keep") == "anomalous":
        keep = KeepAnomalous(settings.get("slow_factor", 1.5), settings.get("window", 20), settings.get("finding_share", 0.5))
    _answer(out, {"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        trace, store = job.pop("trace"), job.pop("store")
        if os.environ.get("TRACEANALYZER_FAULT") == "loop:worker" and not job.get("failure"):
            os.kill(os.getpid(), signal.SIGKILL)  # the tests' dying worker
        try:
            summary = store_trace(trace, store, keep=keep, **job)
        except BaseException as exc:  # noqa: BLE001 - the store could not take the rows: try a status row
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            try:
                store_trace(trace, store, failure=error, **job)
            except BaseException as again:  # noqa: BLE001 - nothing can be stored: the handler logs it
                error += f"; and its status row could not be stored: {type(again).__name__}: {again}".splitlines()[0][:300]
            _answer(out, {"ok": False, "error": error})
            continue
        summary["keep_reason"] = keep.last_reason if keep is not None else None
        if not summary["kept"]:
            Path(trace).unlink(missing_ok=True)
        _answer(out, {"ok": True, "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
