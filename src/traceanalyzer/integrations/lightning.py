"""A Lightning callback: ``torch.profiler`` on a schedule, every trace analysed into the store.

::

    from traceanalyzer.integrations.lightning import TraceAnalyzerCallback

    trainer = lightning.Trainer(callbacks=[TraceAnalyzerCallback("log/run")])

Options: those of :class:`~traceanalyzer.integrations.profiling.ScheduledProfiler` (``every``,
``active``, ``warmup``, ``skip_first``, ``repeat``, ``schedule``, ``activities``,
``profiler_options``, ``log_to="mlflow"``) and of
:func:`~traceanalyzer.integrations.torch.on_trace_ready` (``store``, ``config``, ``keep``, ...).
Importing this module imports Lightning (``pip install 'traceanalyzer[lightning]'``).
"""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback

from traceanalyzer.integrations.profiling import ScheduledProfiler


class TraceAnalyzerCallback(Callback):
    """Profiles training batches on a schedule; each trace goes through the traceanalyzer handler."""

    def __init__(self, dir: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None, **options: Any):
        super().__init__()
        self.profiler = ScheduledProfiler(dir, store=store, **options)

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.profiler.results

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.profiler.start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.profiler.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.profiler.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.profiler.stop()
