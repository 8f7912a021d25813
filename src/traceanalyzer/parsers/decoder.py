"""Which Kineto event decoder runs: the compiled one (``traceanalyzer.parsers._kineto``, built by
``pip install`` where a C compiler is available) or the Python one, the reference.

``TRACEANALYZER_DECODER=native|python`` chooses; unset, the compiled decoder runs when it is
built. Both give the same frames and the same errors (the compiled decoder hands every piece it
does not take with certainty to the Python one). Where the compiled decoder is missing and no
choice was made, one line on stderr says so, once per process (and not again in the worker
processes it starts).
"""

from __future__ import annotations

import os
import sys

ENV = "TRACEANALYZER_DECODER"
_QUIET = "_TRACEANALYZER_DECODER_NOTICE_SHOWN"  # inherited by worker processes
NOTICE = (
    "traceanalyzer: note: the compiled Kineto decoder is not built in this install; using the Python "
    f"decoder (slower, same results; {ENV}=python silences this)"
)
_module: object = None
_loaded = False


def _compiled():
    global _module, _loaded
    if not _loaded:
        try:
            import traceanalyzer.parsers._kineto as _kineto
        except ImportError:
            _kineto = None
        _module, _loaded = _kineto, True
    return _module


def _choice() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    if value not in ("", "native", "python"):
        from traceanalyzer.errors import BadSetting

        raise BadSetting(f"not 'native' or 'python': {value!r}", ENV)
    return value


def name() -> str:
    """The decoder in use, for ``traceanalyzer --version``: ``native``, ``python`` (chosen), or
    ``python (compiled decoder not built)``. Never raises: a bad setting is named as such."""
    try:
        value = _choice()
    except Exception:
        return f"python ({ENV} is neither 'native' nor 'python')"
    if value == "python":
        return "python"
    if _compiled() is None:
        return "python (compiled decoder not built)" if value == "" else "none (native chosen, not built)"
    return "native"


def native():
    """The compiled module when it is the decoder to use, else None (after the notice when it
    is missing and no choice was made). ``native`` chosen but not built: a usage error."""
    value = _choice()
    if value == "python":
        return None
    mod = _compiled()
    if mod is None:
        if value == "native":
            from traceanalyzer.errors import BadSetting

            raise BadSetting("'native' chosen but the compiled decoder is not built in this install", ENV)
        announce()
    return mod


def announce() -> None:
    """The one-line notice, once, when the compiled decoder is missing and no choice was made."""
    if os.environ.get(_QUIET) or os.environ.get(ENV, "").strip() or _compiled() is not None:
        return
    os.environ[_QUIET] = "1"
    print(NOTICE, file=sys.stderr)
