"""Option and argument values converted without pydantic, for the kinds of value our commands
declare: what typer >= 0.29 would give, without its cost at start-up.

typer 0.29 converts every value a command receives (the defaults too) with a pydantic
``TypeAdapter`` that it builds on the parameter's first use: the first value of a run imports
pydantic (about 0.1 s, a tenth of a small trace's ``breakdown``) and each adapter is built
again in every process. The values our commands take are few kinds: a choice (an Enum), a path,
text, a whole or real number (with bounds), a flag, a list of those. :class:`Coercion` converts
them with typer's own pure helpers (``coerce_cli_choice``, ``coerce_cli_path``) or the same
conversion pydantic makes for the simple spellings (``42``, ``-3``, ``0.25``, a path's text), and
leaves everything else to typer: another kind of value (a date, a tuple, a file, a parser), a
spelling it does not know (``1e3``, ``1_000``, ``true``) and every value it refuses, so that
each error message is typer's own (tests/test_cli_coercion.py compares the two on every
parameter of the app).

typer before 0.29 converts with click's types (no pydantic): there, and with any typer whose
internals are not the ones read here, :func:`install` does nothing.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

try:  # typer >= 0.29: the parameter converts with a runtime param it builds on first use
    from typer._coercion import build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, lenient_issubclass, routes_to_path
    from typer.core import _TyperParameter
except ImportError:  # pragma: no cover - older typer: click's types, no pydantic
    build_runtime_param = None

#: the spellings of a number converted here (anything else, typer's pydantic: same value or error)
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?")


class _Typers(Exception):
    """A value for typer's own conversion."""


class Coercion:
    """A parameter's conversion (typer's ``RuntimeParam`` contract: ``coerce(value, param, ctx)``):
    the kinds above here, anything else by typer's own runtime param, built when first needed."""

    def __init__(self, param) -> None:
        self._typer = None
        desc = param.type_descriptor
        self._annotation = desc.annotation
        self._info = desc.parameter_info
        self._file = desc.file_annotation is not None

    def coerce(self, value: Any, param, ctx) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:  # as typer: no value, no conversion
            return () if multi else None
        if not self._file and not (multi and isinstance(value, str)):
            try:
                return self._value(value, param, ctx)
            except Exception:  # noqa: BLE001 - a value we do not convert, or a bad one: typer's error
                pass
        if self._typer is None:
            self._typer = build_runtime_param(param.type_descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)

    def _value(self, value: Any, param, ctx) -> Any:
        ann = self._annotation
        if get_origin(ann) is list:  # as typer: one value is a list of one
            (item,) = get_args(ann)
            return [self._leaf(item, v, param, ctx) for v in (value if isinstance(value, (list, tuple)) else [value])]
        return self._leaf(ann, value, param, ctx)

    def _leaf(self, ann: Any, value: Any, param, ctx) -> Any:
        info = self._info
        if info.parser is not None:
            raise _Typers
        if lenient_issubclass(ann, Enum):
            return coerce_cli_choice(value, choices=list(ann), case_sensitive=info.case_sensitive, ctx=ctx)
        if get_origin(ann) is Literal:
            return coerce_cli_choice(value, choices=get_args(ann), case_sensitive=info.case_sensitive, ctx=ctx)
        if ann is int or ann is float:
            return self._number(ann, value)
        if ann is bool:
            if type(value) is bool:
                return value
            raise _Typers
        if ann is str:
            if type(value) is str:
                return value
            raise _Typers
        if routes_to_path(ann, info):
            path_type = info.path_type
            if path_type is None and lenient_issubclass(ann, Path):
                path_type = ann
            if lenient_issubclass(path_type, Path) and not isinstance(value, path_type):
                if type(value) is not str or not value or "\0" in value:
                    raise _Typers
                value = path_type(value)  # what pydantic makes of a path's text
            return coerce_cli_path(value, info, path_type=path_type, param=param, ctx=ctx)
        raise _Typers

    def _number(self, ann: type, value: Any) -> Any:
        info = self._info
        if info.clamp:
            raise _Typers
        if type(value) is ann:
            n = value
        elif ann is float and type(value) is int:
            n = float(value)
        elif type(value) is str and (_INT if ann is int else _FLOAT).fullmatch(value):
            n = ann(value)
        else:
            raise _Typers
        if n != n or (info.min is not None and n < info.min) or (info.max is not None and n > info.max):
            raise _Typers  # NaN, or out of bounds: typer's message
        return n


def install(params) -> None:
    """Give each typer parameter of ``params`` (a command's, the app's) a :class:`Coercion`; a
    no-op with a typer that converts otherwise."""
    if build_runtime_param is None:
        return
    for p in params:
        if isinstance(p, _TyperParameter) and getattr(p, "_runtime_param", False) is None and hasattr(p, "type_descriptor"):
            p._runtime_param = Coercion(p)
