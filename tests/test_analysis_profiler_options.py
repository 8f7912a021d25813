"""The profiler options a Kineto file was recorded with come with the Analysis: the engine reads
each file's header once, and the findings and the profiler notes read them from there (no view
reads a file)."""

from __future__ import annotations

import dataclasses
import gzip
import re

import traceanalyzer as ta
from conftest import FIXTURES
from traceanalyzer.reconciliation.findings import profiler_notes

TRACE = FIXTURES / "kineto" / "mi300x_resnet_act_checkpoint_rank0.json.gz"


def _header_keys_on(path) -> set[str]:
    """Independently of the parser: the keys set to 1 / true in the raw head before ``traceEvents``."""
    with gzip.open(path, "rb") as fh:
        head = fh.read(1 << 16).split(b'"traceEvents"', 1)[0]
    return {k.decode() for k in re.findall(rb'"(\w+)"\s*:\s*(?:1|true)\b', head)}


def test_the_analysis_carries_each_files_profiler_options():
    a = ta.analyze(TRACE)
    [(file, opts)] = a.profiler_options.items()
    assert file == a.trace.meta.item(0, "file")
    assert opts == ["record_shapes", "with_stack"]  # the header's order of OPTIONS
    assert set(opts) <= _header_keys_on(TRACE) and {"record_shapes", "with_stack"} <= _header_keys_on(TRACE)
    steps = ta.launches(a)  # per step: cpu_bound and the GPU's wait on the host
    [note] = profiler_notes(a, steps)
    assert note["rank"] == 0 and note["options"] == opts and note["may_inflate_host_time"] is True
    # an analysis that carries none (made by hand): no options, and nothing is read from the file
    bare = dataclasses.replace(a, profiler_options=None)
    [note] = profiler_notes(bare, steps)
    assert note["options"] == [] and note["may_inflate_host_time"] is False
