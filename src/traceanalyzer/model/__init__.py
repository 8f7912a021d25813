"""Analytic model of a training step: FLOPs, pipeline bubble, recompute, communication, peaks.

Public surface (everything else is internal):

* :func:`load_config` / :func:`parse_megatron_args` -> :class:`RunConfig` (``config``)
* :func:`step_flops` -> :class:`StepFlops`, :data:`CONVENTIONS`, :func:`tflops_per_gpu`,
  :func:`utilization` (``flops``)
* :data:`GPUS`, :func:`detect_gpu`, :func:`peak_tflops` (``hardware``)
* :func:`bubble_fraction`, :func:`comm_volumes` (``parallel``)
* :func:`predict`, :func:`compare_predictions` (``predict``)
* :func:`~traceanalyzer.model.whatif.apply_sets`, :class:`~traceanalyzer.model.whatif.Anchor`,
  :func:`~traceanalyzer.model.whatif.anchor_from_config` and
  :func:`~traceanalyzer.model.whatif.project` (``whatif``); the anchor of a trace is the
  reconciler's (:func:`traceanalyzer.reconciliation.anchor.anchor_from_analysis`);
  :func:`~traceanalyzer.model.search.search_layouts` (``search``) — imported from their modules

Nothing here prints or reads a trace; the reconciler (``traceanalyzer.reconciliation``) puts these
predictions beside measured time buckets.
"""

from traceanalyzer.model.config import CONVENTIONS, RunConfig
from traceanalyzer.model.loader import load_config, parse_megatron_args
from traceanalyzer.model.flops import StepFlops, step_flops, tflops_per_gpu, utilization
from traceanalyzer.model.hardware import GPUS, detect_gpu, peak_tflops
from traceanalyzer.model.parallel import bubble_fraction, comm_volumes
from traceanalyzer.model.predict import compare_predictions, predict

__all__ = [
    "CONVENTIONS", "GPUS", "RunConfig", "StepFlops", "bubble_fraction", "comm_volumes",
    "compare_predictions", "detect_gpu", "load_config", "parse_megatron_args", "peak_tflops",
    "predict", "step_flops", "tflops_per_gpu", "utilization",
]
