"""The one way a verb keeps an argument's old name working: the decorator
:func:`renamed_parameter`, which maps the old keyword onto the new one and warns with the
version that renamed it."""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar, cast

from traceanalyzer.errors import InvalidArgument

F = TypeVar("F", bound=Callable[..., Any])

#: the version whose arguments got their present names (the old ones still work, with a warning)
RENAMED_IN = "0.1.0"


def renamed_parameter(old: str, new: str, *, version: str) -> Callable[[F], F]:
    """A decorator: the keyword ``old`` of the decorated verb is ``new``'s name before
    ``version``. Given, it is passed on as ``new`` with a :class:`DeprecationWarning`; both
    given with different values is an :class:`~traceanalyzer.errors.InvalidArgument`."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                value = kwargs.pop(old)
                bound = signature.bind_partial(*args, **kwargs).arguments
                if new in bound and bound[new] != value:
                    raise InvalidArgument(f"{new}={bound[new]!r} and {old}={value!r}: {old} is the older name of {new}; give one")
                warnings.warn(f"{function.__name__}: the argument {old!r} was renamed {new!r} in traceanalyzer {version}",
                              DeprecationWarning, stacklevel=_outside())
                if new not in bound:
                    kwargs[new] = value
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _outside() -> int:
    """The ``stacklevel`` of the first caller outside this module (renamed arguments stack, one
    wrapper per name): the warning names the line that used the old name."""
    level, frame = 2, cast("FrameType | None", sys._getframe(2))
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    return level
