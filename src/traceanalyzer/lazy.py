"""A package's attributes loaded on first use.

``import traceanalyzer`` loads no polars (the command line handles a signal before the heavy
libraries load), and ``traceanalyzer.reconciliation`` loads the run-configuration model only for
the names that need it: each lists its names with the module that holds them, and
:func:`lazy_attributes` makes the package import that module when a name is first read. A
sub-module named like one of those attributes (``traceanalyzer.reconciliation.waterfall`` beside
the ``waterfall`` function) stays importable, and importing it never replaces the attribute.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable


def lazy_attributes(package: str, names: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Give the package ``package`` the attributes ``names`` (name -> ``"module:attribute"``),
    imported on first use; returns the package's ``__getattr__`` and ``__dir__``."""
    module = sys.modules[package]

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if name in names and isinstance(value, types.ModuleType):
                return  # the sub-module's import: the attribute stays
            super().__setattr__(name, value)

    module.__class__ = _Package

    def __getattr__(name: str) -> object:
        if name in names:
            where, attr = names[name].split(":")
            value = getattr(importlib.import_module(where), attr)
            setattr(module, name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*vars(module), *names})

    return __getattr__, __dir__
