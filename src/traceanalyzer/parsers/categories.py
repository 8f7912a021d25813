"""Kineto event categories: which canonical kind each ``cat`` becomes.

One table read by the parser (:mod:`traceanalyzer.parsers.kineto`, to set ``kind``) and by the
cleaning checks (:mod:`traceanalyzer.parsers.clean`, to count GPU events and unknown categories).
Categories are matched lower-cased, so the 2021 legacy names (``Operator``, ``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``) map like the current ones.
"""

from __future__ import annotations

from traceanalyzer.schema import GPU_WORK_KINDS

#: lower-cased ``cat`` -> canonical kind; anything else is ``other``
KIND_OF_CAT: dict[str, str] = {
    "kernel": "kernel",
    "mtia_ccp_events": "kernel",  # MTIA device work (HTA counts every row as busy time); DMA: MTIA_DMA_KIND
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "gpu_sync",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "mtia_runtime": "runtime",  # MTIA host runtime calls
    "python_function": "python",
}

#: the kind of an ``mtia_ccp_events`` row whose name starts with ``dma`` (``dma_request``): a
#: transfer, like memcpy (HTA's ``MemoryKernelGroupingPattern`` ``^dma``), not compute
MTIA_DMA_KIND = "memcpy"

#: categories of complete events that are known and carry no GPU time
KNOWN_OTHER_CATS: frozenset[str] = frozenset(
    {"trace", "overhead", "cuda_profiler_range", "python_function", "fwdbwd", "ac2g"}
)

#: categories whose events occupy the GPU (kernels, memcpy, memset)
GPU_WORK_CATS: list[str] = [c for c, k in KIND_OF_CAT.items() if k in GPU_WORK_KINDS]

#: kinds recorded on the GPU timeline (their ``tid`` is a stream)
GPU_TIMELINE_KINDS: list[str] = ["kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation"]
