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

import sys
import types

from traceanalyzer.reconciliation.buckets import loss_columns
from traceanalyzer.reconciliation.compare import compare, compare_time

#: the names whose modules read the run-configuration model (:mod:`traceanalyzer.model`), imported
#: on first use: a command that only reads the findings (breakdown) does not load the model
_LAZY = {
    "attention_flops": "gemm", "gemm_check": "gemm", "matmul_flops": "gemm", "trace_flops": "gemm",
    "attach_overlapped": "waterfall", "waterfall": "waterfall",
}

__all__ = ["waterfall", "compare", "compare_time", "matmul_flops", "attention_flops", "trace_flops", "gemm_check", "loss_columns", "attach_overlapped"]


class _Package(types.ModuleType):
    """Importing the sub-module :mod:`.waterfall` never replaces the function of that name as an
    attribute of the package (the same rule as the top-level package's verbs)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
