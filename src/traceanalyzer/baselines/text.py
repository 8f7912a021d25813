"""Reading a baseline text file (nccl-tests output, ``nvidia-smi topo -m``): every failure is
one line naming the file and a documented exit code."""

from __future__ import annotations

from pathlib import Path

from traceanalyzer.errors import InputNotFound, InvalidTrace


def read_text(path: str | Path, what: str, *, binary: str | None = None, directory: str | None = None) -> tuple[str, Path]:
    """``(text, path)`` of a UTF-8 text file holding ``what`` (e.g. "nccl-tests output"):
    exit 3 when it cannot be read, exit 4 when it is binary or not UTF-8. ``binary`` /
    ``directory``: what the messages for a binary file / a directory say it is not."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputNotFound("no such file", p) from None
    except IsADirectoryError:
        raise InputNotFound(f"is a directory, not {directory or what}", p) from None
    except PermissionError:
        raise InputNotFound("permission denied", p) from None
    except OSError as exc:
        raise InputNotFound(f"cannot read: {exc.strerror or exc}", p) from None
    if b"\x00" in raw[:65536]:
        raise InvalidTrace(f"binary data, not {binary or what}", p)
    try:
        return raw.decode("utf-8"), p
    except UnicodeDecodeError as exc:
        raise InvalidTrace(f"not UTF-8 text (byte {exc.start}): not {what}", p) from None
