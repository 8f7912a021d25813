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

#: (verb, old name, new name, version) of every renamed argument, as the decorators are applied
RENAMED: list[tuple[str, str, str, str]] = []


def renamed_parameter(old: str, new: str, *, version: str, when: Callable[..., bool] | None = None,
                      old_wins: bool = False) -> Callable[[F], F]:
    """A decorator: the keyword ``old`` of the decorated verb is ``new``'s name before
    ``version``. Given, it is passed on as ``new`` with a :class:`DeprecationWarning`; both
    given with different values is an :class:`~traceanalyzer.errors.InvalidArgument`, unless
    ``old_wins`` (the old keyword's value was the one the verb used when both were given: it
    still is).

    ``when(value, args, kwargs)``: for a name that is now another argument's name (``old`` is a
    parameter of the verb again, with another meaning), whether the keyword is meant in its old
    sense; when it says no, the keyword is passed on as it is."""

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        RENAMED.append((function.__name__, old, new, version))

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs and (when is None or when(kwargs[old], args, kwargs)):
                value = kwargs.pop(old)
                bound = signature.bind_partial(*args, **_known(signature, kwargs)).arguments
                if new in bound and old_wins:
                    args, kwargs = _without(signature, new, args, kwargs)
                elif new in bound and not _same(bound[new], value):
                    raise InvalidArgument(f"{new}={bound[new]!r} and {old}={value!r}: {old} is the older name of {new}; give one")
                warnings.warn(f"{function.__name__}: the argument {old!r} was renamed {new!r} in traceanalyzer {version}",
                              DeprecationWarning, stacklevel=_outside())
                if new not in bound or old_wins:
                    kwargs[new] = value
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _known(signature: inspect.Signature, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords the verb takes (another old name, mapped by the next decorator, is not yet)."""
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in signature.parameters}


def _same(a: object, b: object) -> bool:
    """Whether two values of one argument are the same (frames and analyses: the same object)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a frame, or a dataclass of frames: no truth value
        return False


def _without(signature: inspect.Signature, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) without the argument ``name`` (given by position or by keyword)."""
    kwargs = dict(kwargs)
    if name in kwargs:
        del kwargs[name]
        return args, kwargs
    position = list(signature.parameters).index(name)
    following = list(signature.parameters)[position + 1:len(args)]
    kwargs.update(zip(following, args[position + 1:]))  # the positional arguments after it, by name
    return args[:position], kwargs


def _outside() -> int:
    """The ``stacklevel`` of the first caller outside this module (renamed arguments stack, one
    wrapper per name): the warning names the line that used the old name."""
    level, frame = 2, cast("FrameType | None", sys._getframe(2))
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    return level
