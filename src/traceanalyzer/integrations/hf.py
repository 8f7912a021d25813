"""A Hugging Face ``Trainer`` callback: ``torch.profiler`` on a schedule, every trace analysed into the store.

::

    from traceanalyzer.integrations.hf import TraceAnalyzerCallback

    trainer = transformers.Trainer(..., callbacks=[TraceAnalyzerCallback("log/run")])

Options: those of :class:`~traceanalyzer.integrations.profiling.ScheduledProfiler` (``every``,
``active``, ``warmup``, ``skip_first``, ``repeat``, ``schedule``, ``activities``,
``profiler_options``, ``log_to="mlflow"``) and of
:func:`~traceanalyzer.integrations.torch.on_trace_ready` (``store``, ``config``, ``keep``, ...).
One step is one optimizer step (``on_step_end``). Importing this module imports transformers
(``pip install 'traceanalyzer[hf]'``).
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from traceanalyzer.integrations.profiling import ScheduledProfiler


class TraceAnalyzerCallback(TrainerCallback):
    """Profiles training steps on a schedule; each trace goes through the traceanalyzer handler."""

    def __init__(self, dir: str | os.PathLike[str], *, store: str | os.PathLike[str] | None = None, **options: Any):
        self.profiler = ScheduledProfiler(dir, store=store, **options)

    @property
    def results(self) -> list[dict[str, Any]]:
        return self.profiler.results

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.start()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.profiler.stop()
