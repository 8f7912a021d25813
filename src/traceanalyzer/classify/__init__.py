"""Classifiers: canonical frames -> per-rank, per-step partition of GPU time.

Public surface: :class:`~traceanalyzer.results.Analysis` (everything the renderers need; defined in
the ground, re-exported here), built from the per-rank classifiers here by the engine (the recipe
of :mod:`.pipeline` per rank, reduced per job).
Classifiers never print.
"""

from __future__ import annotations

# the names of the buckets and their causes (the ground's vocabulary), re-exported for the classifiers' readers
from traceanalyzer.buckets import BUCKETS, COMM_DIM_FIELDS, FIELDS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.results import Analysis

__all__ = ["Analysis", "BUCKETS", "FIELDS", "IDLE_FIELDS", "HOST_FIELDS", "COMM_DIM_FIELDS"]
