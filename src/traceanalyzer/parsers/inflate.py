"""Bytes of a trace file, plain or gzip, block by block, with the inflation cap.

* Every gzip member is read (``cat a.gz b.gz``, bgzip): the file's bytes are the members'
  bytes one after the other, as ``gzip -dc`` gives them. Zero padding after the last member
  is ignored; other bytes after it are ignored with a warning that counts them.
* A gzip file that inflates to more than :data:`DEFAULT_MAX_RATIO` times the compressed bytes
  read so far, once past :data:`RATIO_FLOOR` bytes of output, is refused (exit 4, naming the
  file) while streaming: a decompression bomb never reaches memory. Real traces inflate 10 to
  30 times. ``TRACEANALYZER_MAX_INFLATION_RATIO`` sets the ratio (``0`` turns the check off);
  ``TRACEANALYZER_MAX_INFLATED`` caps the inflated bytes of one file outright (bytes, or with
  a ``K``/``M``/``G``/``T`` suffix; no cap by default).
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from pathlib import Path

from traceanalyzer.errors import BadSetting, InputNotFound, InvalidTrace, TraceAnalyzerError, open_input  # noqa: F401 (BadSetting: re-exported)

try:  # zlib-ng inflates 2.2-2.4x as fast as the stdlib's zlib, with its API and error messages
    from zlib_ng import zlib_ng as _inflater
except ImportError:  # pragma: no cover - a declared dependency; the stdlib otherwise
    _inflater = zlib
#: what a corrupt stream raises (zlib-ng's error is not the stdlib's class)
_ZLIB_ERRORS = (zlib.error, _inflater.error)

#: refuse gzip input that inflates more than this many times its compressed size ...
DEFAULT_MAX_RATIO = 200
#: ... once it has inflated to more than this many bytes (small files may inflate as they like)
RATIO_FLOOR = 256 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def _size(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for i, unit in enumerate("KMGT", start=1):
        if t.endswith(unit):
            t, mult = t[:-1], 1 << (10 * i)
            break
    return int(float(t) * mult)


def limits() -> tuple[float, int | None]:
    """(max inflation ratio or 0 for none, max inflated bytes or None) from the environment.
    A value that does not parse is a usage error, reported naming the variable."""
    ratio_s = os.environ.get("TRACEANALYZER_MAX_INFLATION_RATIO")
    size_s = os.environ.get("TRACEANALYZER_MAX_INFLATED")
    try:
        ratio = float(ratio_s) if ratio_s not in (None, "") else float(DEFAULT_MAX_RATIO)
        if not ratio >= 0:
            raise ValueError
    except ValueError:
        raise BadSetting(f"not a number: {ratio_s!r}", "TRACEANALYZER_MAX_INFLATION_RATIO") from None
    try:
        size = _size(size_s) if size_s not in (None, "") else None
        if size is not None and size <= 0:
            raise ValueError
    except (ValueError, OverflowError):
        raise BadSetting(f"not a size: {size_s!r}", "TRACEANALYZER_MAX_INFLATED") from None
    return ratio, size


class Stream:
    """Decompressed blocks of a file (plain or gzip), with whether the gzip stream was cut.

    A zlib error anywhere is "corrupt gzip data" (exit 4), whatever inflated before it: a stream
    that is merely cut short raises none (it ends without its trailer: :attr:`cut`). Where the
    error lies says nothing of how much before it is sound, and which block it falls in must not
    decide between an error and a recovered trace.
    """

    def __init__(self, path: Path, block: int, progress=None, reuse: int = 0):
        self.path = path
        #: ``reuse``: a plain file is read into this many buffers in turn, each block a memoryview
        #: of one, valid until ``reuse - 1`` more blocks have been taken (0: a new ``bytes`` each)
        self.reuse = reuse
        #: ``progress(n)``: called with the bytes of the file (compressed, for gzip) read since the last call
        self.progress = progress or (lambda n: None)
        self.block = block
        self.cut = False
        self.total = 0
        self.warnings: list[str] = []
        self._limits: tuple[float, int | None] = (0.0, None)

    def _check(self, read: int) -> None:
        ratio, size = self._limits
        if size is not None and self.total > size:
            raise InvalidTrace(
                f"gzip data inflates to more than {size:,} bytes (TRACEANALYZER_MAX_INFLATED): refused", self.path
            )
        if ratio and self.total > RATIO_FLOOR and self.total > ratio * max(read, 1):
            raise InvalidTrace(
                f"gzip data inflates more than {ratio:g} times ({read:,} compressed bytes gave {self.total:,}): "
                "refused as a possible decompression bomb (TRACEANALYZER_MAX_INFLATION_RATIO=0 allows it)",
                self.path,
            )

    def blocks(self):
        path, block = self.path, self.block
        with open_input(path) as fh:
            reported = 0  # file bytes reported to ``progress`` (compressed bytes consumed, for gzip)

            def report(upto: int) -> None:
                nonlocal reported
                if upto > reported:
                    self.progress(upto - reported)
                    reported = upto

            try:
                yield from self._blocks(fh, path, block, report)
            finally:
                try:
                    report(fh.tell())  # the rest: trailing bytes, a cut, an error
                except (OSError, ValueError):
                    pass

    def _blocks(self, fh, path: Path, block: int, report):
        first = fh.read(block)
        if not first:
            raise InvalidTrace("empty file (0 bytes)", path)
        if first[:2] != _GZIP_MAGIC:
            read = len(first)
            self.total += read
            report(read)
            yield first
            if self.reuse:
                yield from self._plain_into(fh, block, read, report)
                return
            data = fh.read(block)
            while data:
                read += len(data)
                self.total += len(data)
                report(read)
                yield data
                data = fh.read(block)
            return
        self._limits = limits()
        read = len(first)
        d = _inflater.decompressobj(16 + zlib.MAX_WBITS)
        data = first
        while True:
            try:
                out = d.decompress(data, block)
            except _ZLIB_ERRORS as exc:
                raise InvalidTrace(f"corrupt gzip data ({exc})", path) from None
            consumed = read - len(d.unconsumed_tail) - len(d.unused_data)
            report(consumed)
            if out:
                self.total += len(out)
                self._check(consumed)
                yield out
            if d.eof:  # end of a member: the next one, zero padding, or trailing bytes
                rest = d.unused_data
                while len(rest) < 2:
                    more = fh.read(block >> 2)
                    if not more:
                        break
                    read += len(more)
                    rest += more
                if rest[:2] == _GZIP_MAGIC:
                    d = _inflater.decompressobj(16 + zlib.MAX_WBITS)
                    data = rest
                    continue
                self._trailing(rest, fh)
                return
            data = d.unconsumed_tail
            if not data:
                data = fh.read(block >> 2)
                read += len(data)
            if not data:
                break
        try:
            out = d.flush()
        except _ZLIB_ERRORS:
            out = b""
        if out:
            self.total += len(out)
            yield out
        self.cut = not d.eof

    def _plain_into(self, fh, block: int, read: int, report):
        """The rest of a plain file read into :attr:`reuse` buffers in turn: no allocation and no
        fresh pages per block (a new 4 MiB ``bytes`` a block cost some 13,000 page faults, 35 ms
        of system time, per 54 MB of JSON)."""
        ring = [bytearray(block) for _ in range(self.reuse)]
        i = 0
        while True:
            buf = ring[i % len(ring)]
            i += 1
            n = fh.readinto(buf)
            if not n:
                return
            read += n
            self.total += n
            report(read)
            yield memoryview(buf)[:n]

    def _trailing(self, rest: bytes, fh) -> None:
        n = len(rest) - len(rest.lstrip(b"\x00"))
        garbage = len(rest) - n
        while True:
            more = fh.read(1 << 20)
            if not more:
                break
            if garbage == 0:
                stripped = more.lstrip(b"\x00")
                garbage += len(stripped)
            else:
                garbage += len(more)
        if garbage:
            self.warnings.append(f"{self.path}: ignored {garbage} bytes after the end of the gzip data (not a gzip member)")


def read_all(path: Path, block: int = 1 << 22) -> tuple[bytes, bool, list[str]]:
    """The whole (inflated) bytes of ``path``, whether a gzip stream was cut short, and the
    warnings of :class:`Stream`. A zlib error is "corrupt gzip data" (exit 4)."""
    s = Stream(path, block)
    data = b"".join(s.blocks())
    return data, s.cut, s.warnings


#: blocks :func:`prefetched` reads ahead
PREFETCH = 3
#: buffers a :class:`Stream` read through :func:`prefetched` may use in turn (``reuse``): the
#: block being filled, those queued, the one the consumer holds and the one it held before
REUSE = PREFETCH + 3


def prefetched(blocks, depth: int = PREFETCH):
    """Run the ``blocks`` generator in a thread, ``depth`` blocks ahead: zlib and file reads
    release the GIL, so decompression overlaps with decoding. Exceptions are re-raised here.
    A block the consumer took stays as it is until it has taken ``depth + 1`` more."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for b in blocks:
                while not stop.is_set():
                    try:
                        q.put((b, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            item = (done, None)
        except BaseException as exc:  # handed to the consumer
            item = (None, exc)
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    t = threading.Thread(target=produce, name="traceanalyzer-read", daemon=True)
    t.start()
    try:
        while True:
            b, exc = q.get()
            if exc is not None:
                raise exc
            if b is done:
                return
            yield b
    finally:
        stop.set()
        t.join()
