"""The command line's vocabularies and the checks of its values, beyond what an option's type
checks: the choices and defaults the commands offer (each loaded from the package that defines
it on first use, so that a command registers its options without importing every package), the
checks a command runs on its values before any file is read (a bad one is a ConfigError naming
the parameter), and :class:`BadValue`, a value the input does not have (a rank, a step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.results import Analysis

#: the vocabularies the command line offers as choices and defaults, re-exported here (a command
#: imports the API, never the package that defines them); each loads on first use, so that a
#: command does not import every package to register its options
_VOCABULARY: dict[str, str] = {
    "BINARIES": "traceanalyzer.baselines",
    "LAST_GOOD": "traceanalyzer.store.gate",
    "parse_threshold": "traceanalyzer.store.gate",
    "METRICS": "traceanalyzer.store.trend",
    "DEFAULT_BUS_BW_GBPS": "traceanalyzer.classify.comm",
    "TRANSFER_WARNING": "traceanalyzer.classify.comm",
    "SORT_KEYS": "traceanalyzer.classify.kernelstats",
    "ELEMENT_BYTES": "traceanalyzer.classify.roofline",
    "CONVENTIONS": "traceanalyzer.model.config",
    "HFU_CONVENTIONS": "traceanalyzer.model.flops",
    "DEFAULT_RESERVE_GIB": "traceanalyzer.model.memory",
    "GIB": "traceanalyzer.model.memory",
    "PLAN_CONVENTIONS": "traceanalyzer.model.runplan",
    "parse_count": "traceanalyzer.model.runplan",
    "parse_range": "traceanalyzer.model.runplan",
}


def __getattr__(name: str) -> Any:
    module = _VOCABULARY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def check_table_filters(name: str | None, sort: str, precision: str | None, top: int | None) -> None:
    """ConfigError for a bad ``--name`` regex, ``--sort`` key, ``--precision`` or ``--top``."""
    from traceanalyzer.classify.tables import check_filters

    check_filters(name, sort, precision, top)


def check_range_regex(pattern: str | None) -> None:
    """ConfigError unless ``pattern`` (``--name`` of ``annotations``) is a regex polars can use."""
    from traceanalyzer.classify.annotation_ranges import check_regex

    check_regex(pattern)


class BadValue(InvalidArgument):
    """A value of an argument (``param``, its Python name) that the input does not have (a rank,
    a step): the command line's usage error naming the argument's flag (exit 2)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def check_selection(an: Analysis, rank: list[int] | None, step: list[int] | None) -> None:
    """BadValue for a ``rank`` or ``step`` that is not in the trace, naming what there is."""
    def listing(xs: list[int]) -> str:
        return ", ".join(map(str, xs[:16])) + (", ..." if len(xs) > 16 else "")

    ranks = sorted(set(an.steps.get_column("rank").to_list()))
    steps = sorted(set(an.steps.get_column("step").to_list()))
    bad = [r for r in rank or [] if r not in ranks]
    if bad:
        raise BadValue(f"no rank {bad[0]} with GPU work in the trace (ranks: {listing(ranks)})", "rank")
    bad = [x for x in step or [] if x not in steps]
    if bad:
        raise BadValue(f"no step {bad[0]} in the trace (steps: {listing(steps)})", "step")


def check_plan_mfu(text: str) -> None:
    """ConfigError unless ``text`` (``--mfu``) is a fraction of the peak or a range of them."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model.runplan import parse_range

    _lo, hi = cast("tuple[float, float]", parse_range(text, "`mfu`", percent_ok=True))  # None only for None
    if hi > 1:
        raise ConfigError(f"`mfu` {text!r}: a fraction of the peak (≤ 1, or a percentage)")


def check_whatif_options(convention: str | None, capacity_gb: float | None, reserve_gb: float | None) -> None:
    """ConfigError for a ``--convention``, ``--capacity-gb`` or ``--reserve-gb`` of ``whatif``
    that cannot be."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.validate import check_positive

    if convention is not None and convention not in CONVENTIONS:
        raise ConfigError(f"`convention` {convention!r} is not one of {', '.join(CONVENTIONS)}")
    check_positive("`capacity_gb`", capacity_gb)
    if reserve_gb is not None and reserve_gb < 0:
        raise ConfigError(f"`reserve_gb` {reserve_gb} must not be negative")
