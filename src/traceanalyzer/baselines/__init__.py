"""Baselines of the cluster itself: what nccl-tests measured and how the GPUs are wired.

Public surface:

* :func:`read_nccl_tests` -> frame of bus bandwidth by collective, message size and scope
  (:data:`NCCL_SCHEMA`); :func:`bus_factor` (the nccl-tests formulas);
* :func:`read_topology` -> :class:`Topology` (the ``nvidia-smi topo -m`` matrix, CPU/NUMA
  affinity, NIC names); :func:`tp_group_links` flags tensor-parallel groups that span non-NVLink
  pairs;
* :func:`link_health` / :func:`health_summary`: measured bus bandwidth against the link
  bandwidth of the hardware table, with a ratio and a plain-words verdict;
* :func:`busbw_at`: the baseline's bus bandwidth at any message size (interpolated).

Nothing here prints; ``traceanalyzer baseline`` renders these frames.
"""

from traceanalyzer.baselines.curve import busbw_at
from traceanalyzer.baselines.health import health_summary, link_health
from traceanalyzer.baselines.nccltests import BINARIES, NCCL_SCHEMA, bus_factor, parse_nccl_tests, read_nccl_tests
from traceanalyzer.baselines.topology import Topology, parse_topology, read_topology, tp_group_links

__all__ = [
    "BINARIES", "NCCL_SCHEMA", "Topology", "bus_factor", "busbw_at", "health_summary", "link_health",
    "parse_nccl_tests", "parse_topology", "read_nccl_tests", "read_topology", "tp_group_links",
]
