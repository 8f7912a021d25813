"""The reconciler: measured time buckets of a trace, converted to TFLOP/s/GPU, beside the theory.

Modules, one idea each:

* :mod:`.waterfall` — :func:`waterfall` (one trace + its run configuration -> peak = achieved +
  losses, exactly) and :func:`attach_overlapped`;
* :mod:`.gemm` — :func:`matmul_flops` and :func:`gemm_check` (does the trace's matmul work match
  the configuration?);
* :mod:`.compare` — :func:`compare` (two waterfalls) and :func:`compare_time` (two analyses, no
  configuration);
* :mod:`.buckets` — :func:`loss_columns` (the measured buckets the others read).
* :mod:`.busbw` — :func:`~.busbw.achieved_busbw` (each collective of an analysis against the
  cluster's nccl-tests baseline or the hardware table);
* :mod:`.anchor` — :func:`~.anchor.anchor_from_analysis` (the measured step of an analysis as
  the what-if model's anchor) and the ``whatif`` function that takes an analysis.

Nothing here prints; renderers live in :mod:`traceanalyzer.render.predictions`.
"""

from traceanalyzer.lazy import lazy_attributes
from traceanalyzer.reconciliation.buckets import loss_columns
from traceanalyzer.reconciliation.compare import compare, compare_time

#: the names whose modules read the run-configuration model (:mod:`traceanalyzer.model`), imported
#: on first use: a command that only reads the findings (breakdown) does not load the model
_LAZY = {
    "attention_flops": "gemm", "gemm_check": "gemm", "matmul_flops": "gemm", "trace_flops": "gemm",
    "attach_overlapped": "waterfall", "waterfall": "waterfall",
}

__all__ = ["waterfall", "compare", "compare_time", "matmul_flops", "attention_flops", "trace_flops", "gemm_check", "loss_columns", "attach_overlapped"]


# importing the sub-module :mod:`.waterfall` never replaces the function of that name
__getattr__, __dir__ = lazy_attributes(__name__, {name: f"{__name__}.{module}:{name}" for name, module in _LAZY.items()})
