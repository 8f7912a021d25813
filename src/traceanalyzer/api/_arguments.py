"""The API's vocabulary: one name per idea, one type per name, and the check every verb makes of
its arguments before it reads a file.

:data:`VOCABULARY` names every argument a public verb takes, what it means and what it must be.
The decorator :func:`checked` binds a verb's arguments (an unknown keyword, a missing or an extra
argument is an :class:`~traceanalyzer.errors.InvalidArgument` naming the verb) and checks each
one, by its name, against that table: a value of the wrong type is an ``InvalidArgument`` that
names the argument. ``None`` is accepted where the verb's default is ``None`` (and for
``step_range``, where it means the whole trace is one step). A value's range and its choices
(``per="rank"``...) are the verbs' own checks, made after these.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from traceanalyzer.errors import InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])


def _is_path(v: object) -> bool:
    return isinstance(v, (str, os.PathLike))


def _is_int(v: object) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_paths(v: object) -> bool:
    """A path, or several: a list or tuple of paths, or another iterable of them (a generator is
    taken as it is; its items are checked when it is read)."""
    if _is_path(v):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_path(p) for p in v)
    return isinstance(v, Iterable) and not isinstance(v, (bytes, bytearray, Mapping)) and not hasattr(v, "keys")


def _is_source(v: object) -> bool:
    from traceanalyzer.results import Analysis
    from traceanalyzer.schema import Trace

    return isinstance(v, (Trace, Analysis)) or _is_paths(v)


def _is_config(v: object) -> bool:
    from traceanalyzer.model import RunConfig

    return _is_path(v) or isinstance(v, RunConfig)


def _is_ints(v: object) -> bool:
    """One integer, or several: a list, tuple, set or range of them, or a polars Series or numpy
    array of an integer type (``a.steps["rank"].unique()``)."""
    if _is_int(v):
        return True
    if isinstance(v, (list, tuple, set, frozenset, range)):
        return all(_is_int(x) for x in v)
    dtype = getattr(v, "dtype", None)
    if dtype is None or not hasattr(v, "__iter__"):
        return False
    import polars as pl

    if isinstance(v, pl.Series):
        return v.dtype.is_integer()
    return getattr(dtype, "kind", None) in ("i", "u")  # numpy


def _is_strings(v: object) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


def _is_baseline(v: object) -> bool:
    import polars as pl

    return isinstance(v, pl.DataFrame) or _is_paths(v)


def _is_sets(v: object) -> bool:
    from traceanalyzer.model import RunConfig

    return isinstance(v, (dict, RunConfig)) or _is_strings(v)


def _is_rate(v: object) -> bool:
    return _is_number(v) or isinstance(v, str) or (isinstance(v, tuple) and len(v) == 2 and all(_is_number(x) for x in v))


@dataclass(frozen=True)
class Word:
    """One argument name: what it means (the idea), and the test and wording of its type."""

    idea: str
    test: Callable[[object], bool]
    expected: str
    nullable: bool = False  # None accepted whatever the verb's default


SOURCE = "a path, a list of paths, a Trace or an Analysis"
PATHS = "a path or a list of paths"

#: every argument name of the public verbs: (the idea it stands for, its type); a verb takes no
#: other name (a test checks it), and no idea has two names
VOCABULARY: dict[str, Word] = {
    # what to analyse
    "source": Word("the trace: a path (file, directory of rank files, list), a Trace or an Analysis", _is_source, SOURCE),
    "a": Word("the reference run of a comparison (as ``source``)", _is_source, SOURCE),
    "b": Word("the run compared with ``a`` (as ``source``)", _is_source, SOURCE),
    "path": Word("trace files to load (no Trace or Analysis: that is ``source``)", _is_paths, PATHS),
    "roots": Word("directories searched for runs, or trace files (``batch``)", _is_paths, PATHS),
    "store": Word("the directory of the store of runs", _is_path, "a path"),
    "files": Word("nccl-tests output files (``baseline``'s own input)", _is_paths, PATHS),
    "topo": Word("``nvidia-smi topo -m`` output", _is_path, "a path"),
    "output": Word("the file (or directory) to write", _is_path, "a path"),
    # how to read and classify it
    "step_range": Word("the host range that marks a step (``None``: the whole trace is one step)", lambda v: isinstance(v, str),
                       "a range name (a string) or None", nullable=True),
    "recompute_range": Word("regex of extra ranges whose GPU work is recompute", lambda v: isinstance(v, str), "a regular expression (a string)"),
    "comm_kernels": Word("regexes of extra communication kernel names", _is_strings, "a list of regular expressions"),
    "bus_bw_gbps": Word("bus bandwidth (GB/s) to estimate a transfer", _is_number, "a number"),
    "cache": Word("the parse cache: True, False or its directory", lambda v: isinstance(v, bool) or _is_path(v), "True, False or a directory"),
    "workers": Word("processes that parse rank files", _is_int, "an integer"),
    "engine": Word("where the work runs: ``local`` or ``ray``", lambda v: isinstance(v, str), "a string"),
    "address": Word("the Ray cluster", lambda v: isinstance(v, str), "a string"),
    "quiet": Word("no progress bar", lambda v: isinstance(v, bool), "True or False"),
    "force": Word("analyse again what is stored", lambda v: isinstance(v, bool), "True or False"),
    "gpu_only": Word("keep the GPU allocator's memory events only", lambda v: isinstance(v, bool), "True or False"),
    # what part of it, and how the rows are laid out
    "ranks": Word("keep these ranks (one or several)", _is_ints, "an integer or a list of integers"),
    "steps": Word("keep these step numbers (one or several)", _is_ints, "an integer or a list of integers"),
    "rank": Word("one rank (the one a verb looks at)", _is_int, "an integer"),
    "step": Word("one step number", _is_int, "an integer"),
    "per": Word("what one row is: ``step``, ``rank``, ``kernel``, ``name``...", lambda v: isinstance(v, str), "a string"),
    "by": Word("what communication is keyed by: ``type``, ``group`` or ``dim``", lambda v: isinstance(v, str), "a string"),
    "series": Word("the queue's time series instead of its summary", lambda v: isinstance(v, bool), "True or False"),
    "show_ranks": Word("every rank listed, or their summary (``auto``, ``all``, ``summary``)", lambda v: isinstance(v, str), "a string"),
    "name": Word("regex a name must match", lambda v: isinstance(v, str), "a regular expression (a string)"),
    "level": Word("an annotation's nesting level", _is_int, "an integer"),
    "side": Word("which annotation ranges: ``gpu``, ``host`` or ``auto``", lambda v: isinstance(v, str), "a string"),
    "sort": Word("the column rows are sorted by", lambda v: isinstance(v, str), "a string"),
    "top": Word("how many rows (or ranks, layouts) to keep", _is_int, "an integer"),
    "precision": Word("the precision of kernels whose name states none", lambda v: isinstance(v, str), "a string"),
    "threshold": Word("the share of a step that makes it launch-bound", _is_number, "a number"),
    "tolerance": Word("the fraction of the median step time a slow rank exceeds it by", _is_number, "a number"),
    "format": Word("the format of the file written", lambda v: isinstance(v, str), "a string"),
    "merge": Word("every rank in one file", lambda v: isinstance(v, bool), "True or False"),
    "infer_waits": Word("infer waits between streams", lambda v: isinstance(v, bool), "True or False"),
    "wait_slack_ns": Word("the delay (ns) after which a wait is inferred", _is_int, "an integer"),
    "host_gaps": Word("weigh the host's time outside ops", lambda v: isinstance(v, bool), "True or False"),
    # the model
    "config": Word("a run configuration: a TOML path or a RunConfig", _is_config, "a path or a RunConfig"),
    "megatron_args": Word("Megatron-LM arguments, script or log", _is_path, "a path"),
    "vs": Word("a reference run configuration", _is_config, "a path or a RunConfig"),
    "sets": Word("changes to a configuration: ``[\"pp=2\", ...]``, a dict or a RunConfig", _is_sets,
                 "a list of KEY=VALUE changes, a dict or a RunConfig"),
    "baseline": Word("nccl-tests output: file(s) or a frame read from them", _is_baseline, "a path, a list of paths or a DataFrame"),
    "convention": Word("the FLOPs convention", lambda v: isinstance(v, str), "a string"),
    "hfu": Word("how recompute counts in HFU", lambda v: isinstance(v, str), "a string"),
    "kernel_efficiency": Word("the fraction of peak compute kernels reach", _is_number, "a number"),
    "global_batch": Word("a global batch, or several (a sweep)", _is_ints, "an integer or a list of integers"),
    "reserve_gib": Word("GiB kept free per GPU", _is_number, "a number"),
    "capacity_gib": Word("GiB of one GPU", _is_number, "a number"),
    "tokens": Word("training tokens (a number or ``\"15T\"``)", lambda v: _is_number(v) or isinstance(v, str), "a number or a string"),
    "params": Word("parameter count (a number or ``\"405B\"``)", lambda v: _is_number(v) or isinstance(v, str), "a number or a string"),
    "gpus": Word("number of GPUs", _is_int, "an integer"),
    "gpu": Word("a GPU's name (``\"H100 SXM\"``)", lambda v: isinstance(v, str), "a string"),
    "mfu": Word("model FLOPs utilisation: a fraction, a range ``\"38-43%\"`` or (low, high)", _is_rate, "a number, a string or (low, high)"),
    "tflops": Word("sustained TFLOP/s per GPU: a number, a range or (low, high)", _is_rate, "a number, a string or (low, high)"),
    "price_per_gpu_hour": Word("price of a GPU-hour", _is_number, "a number"),
    "nvlink_gbps": Word("NVLink rate, GB/s per direction", _is_number, "a number"),
    "net_gbps": Word("NIC bandwidth per GPU, GB/s per direction", _is_number, "a number"),
    "collective": Word("the collective of nccl-tests files that do not say", lambda v: isinstance(v, str), "a string"),
    "nranks": Word("the rank count of nccl-tests files that do not list ranks", _is_int, "an integer"),
    "scope": Word("``intra`` or ``inter`` node", lambda v: isinstance(v, str), "a string"),
    # the store
    "metric": Word("the stored metric", lambda v: isinstance(v, str), "a string"),
    "since": Word("the first date (``YYYY-MM-DD``)", lambda v: isinstance(v, str), "a string"),
    "job": Word("one job of the store", lambda v: isinstance(v, str), "a string"),
    "reference": Word("the stored run a gate compares with: ``last-good`` or a run id", lambda v: isinstance(v, str), "a string"),
    "max_regression": Word("the largest slowdown allowed: a fraction or ``\"3%\"``", lambda v: _is_number(v) or isinstance(v, str),
                           "a number or a string"),
}


def _got(value: object) -> str:
    text = repr(value)
    return type(value).__name__ + (f" {text}" if len(text) <= 40 and not text.startswith("<") else "")


def check(name: str, value: object, *, nullable: bool = False) -> None:
    """InvalidArgument naming ``name`` unless ``value`` is of the type :data:`VOCABULARY` gives it."""
    word = VOCABULARY[name]
    if value is None and (nullable or word.nullable):
        return
    if not word.test(value):
        raise InvalidArgument(f"{name}: expected {word.expected}, got {_got(value)}")


def checked(function: F) -> F:
    """A decorator: the verb's arguments are bound and checked against :data:`VOCABULARY` (its
    ``**options`` too, by their names) before it runs. Every parameter of a public verb is a word
    of the vocabulary (tests/test_api_even.py checks it; a name that is not is left unchecked)."""
    signature = inspect.signature(function)
    params = signature.parameters
    nullable = {n for n, p in params.items() if p.default is None}

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:  # a missing, extra or unknown argument: worded for the verb
            raise InvalidArgument(f"{function.__name__}: {exc}") from None
        for name, value in bound.arguments.items():
            kind = params[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                for key, v in value.items():
                    if key in VOCABULARY:
                        check(key, v, nullable=True)
            elif kind is not inspect.Parameter.VAR_POSITIONAL and name in VOCABULARY:
                check(name, value, nullable=name in nullable)
        return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
