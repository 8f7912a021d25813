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

from traceanalyzer.reconciliation.buckets import loss_columns
from traceanalyzer.reconciliation.compare import compare, compare_time
from traceanalyzer.reconciliation.gemm import attention_flops, gemm_check, matmul_flops, trace_flops
from traceanalyzer.reconciliation.waterfall import attach_overlapped, waterfall

__all__ = ["waterfall", "compare", "compare_time", "matmul_flops", "attention_flops", "trace_flops", "gemm_check", "loss_columns", "attach_overlapped"]
