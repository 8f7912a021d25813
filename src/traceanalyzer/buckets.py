"""The vocabulary of the time buckets: their names, order, labels and colours, and the names of
the causes that split them.

Every rank's step time is split exactly into five buckets (compute, recompute, exposed
communication, other, idle). The classifiers compute them (:mod:`traceanalyzer.classify`) and
every output names and colours them; both read the words from here, so this module holds names
only, never a number of a trace. It is part of the ground: any layer may import it, it imports
nothing of the package.
"""

from __future__ import annotations

#: the buckets of the exact partition of a step, in the order every output shows them
BUCKETS = ["compute", "recompute", "exposed_comm", "other", "idle"]
#: how every output names the buckets (and overlapped communication, reported beside them)
BUCKET_LABELS = {
    "compute": "compute",
    "recompute": "recompute",
    "exposed_comm": "exposed comm",
    "other": "other",
    "idle": "idle",
    "overlapped_comm": "overlapped comm",
}
#: one fixed colour per bucket in every plot and legend: the Okabe & Ito (2008) "Color Universal
#: Design" palette, distinguishable with every common colour-vision deficiency
BUCKET_COLORS = {
    "compute": "#0072B2",  # blue
    "recompute": "#56B4E9",  # sky blue: a kind of compute
    "exposed_comm": "#D55E00",  # vermillion: the loss that stands out
    "other": "#CC79A7",  # reddish purple
    "idle": "#999999",  # mid grey
    "overlapped_comm": "#009E73",  # bluish green (not a bucket: shown beside the partition)
}
#: the per-step time fields (``<field>_ns`` / ``_us`` columns of ``Analysis.steps``)
FIELDS = ["duration", *BUCKETS[:3], "overlapped_comm", *BUCKETS[3:]]

#: idle split by cause (``idle_<cause>_ns``; sum = idle)
IDLE_CAUSES = ["host_bound", "sync", "bubble", "other"]
#: what the host thread did during host-bound idle (``idle_host_<cause>_ns``; sum = idle_host_bound_ns)
HOST_CAUSES = ["dataloader", "optimizer", "ops", "untraced"]
#: the parallelism dimensions exposed communication is attributed to
COMM_DIMENSIONS = ["TP", "DP", "PP", "CP", "EP", "unknown"]
#: exposed communication of collectives of several dimensions at once
COMM_CONCURRENT = "concurrent"

#: idle split by cause (``idle_<cause>_ns/_us`` columns of ``Analysis.steps``; sum = idle)
IDLE_FIELDS = [f"idle_{c}" for c in IDLE_CAUSES]
#: host-bound idle split by what the launching host thread did (``idle_host_<cause>_ns/_us``; sum = idle_host_bound)
HOST_FIELDS = [f"idle_host_{c}" for c in HOST_CAUSES]
#: exposed communication by parallelism dimension (``exposed_comm_<dim>_ns/_us``; sum = exposed_comm)
COMM_DIM_FIELDS = [f"exposed_comm_{d.lower()}" for d in [*COMM_DIMENSIONS, COMM_CONCURRENT]]

#: the buckets of a critical path: the step's buckets and the host's own time
CP_BUCKETS = [*BUCKETS, "host"]
