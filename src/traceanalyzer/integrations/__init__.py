"""Training-loop integrations: analyse every trace where it is written, into the store.

* :mod:`traceanalyzer.integrations.torch` — ``on_trace_ready(dir, ...)``, a drop-in for
  ``torch.profiler.tensorboard_trace_handler`` that also stores each trace's analysis;
* :mod:`traceanalyzer.integrations.lightning` — a Lightning ``Callback``;
* :mod:`traceanalyzer.integrations.hf` — a Hugging Face ``TrainerCallback``;
* :mod:`traceanalyzer.integrations.mlflow` — the ``log_to="mlflow"`` logger.

Importing this package imports none of them; each imports its framework only when imported
itself, and the analysis runs in a separate process (docs/training-loop.md).
"""
