"""The hardware table, as the model has always imported it: it lives in
:mod:`traceanalyzer.hardware` (the ground every layer may read: baselines and classify use it
too, and neither imports the model)."""

from traceanalyzer.hardware import (  # noqa: F401 - re-exported
    BUS_EFFICIENCY, GPUS, MEMORY_GIB, GpuSpec, bandwidths, detect_gpu, gpu_spec, memory_bytes, peak_tflops,
)
