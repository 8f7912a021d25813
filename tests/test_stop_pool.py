"""Stopping a process pool whose worker was killed in the middle of writing its result.

The case behind a Ctrl-C that hung ``batch`` for good: the pool's manager thread had read the
start of a result message and waited for the rest, which the terminated worker never wrote;
the interpreter's exit joins that thread. Here a worker writes such half message on purpose
(the length header of 1 MiB, then 10 bytes) and waits to be stopped."""

from __future__ import annotations

import gc
import multiprocessing
import struct
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from traceanalyzer.interrupts import stop_pool


def _write_half_a_result() -> None:
    from multiprocessing.queues import SimpleQueue

    (queue,) = [o for o in gc.get_objects() if isinstance(o, SimpleQueue)]  # the pool's result queue
    import os

    os.write(queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"0123456789")
    time.sleep(600)


def _ready() -> int:
    return 1


def test_a_worker_killed_mid_message_does_not_leave_the_manager_thread_waiting():
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    assert pool.submit(_ready).result(timeout=60) == 1
    manager = pool._executor_manager_thread
    pool.submit(_write_half_a_result)
    time.sleep(2.0)  # the header is written: the manager thread now waits for the other 1 MiB
    assert manager.is_alive()
    errors: list[BaseException] = []
    previous = threading.excepthook
    started = time.monotonic()
    try:
        threading.excepthook = lambda args: errors.append(args.exc_value)
        stop_pool(pool, timeout=5.0)
    finally:
        threading.excepthook = previous
    assert time.monotonic() - started < 15
    assert not manager.is_alive()  # ended: the interpreter's exit has nothing to wait for
    assert errors == []  # whatever the manager thread raised on its way out was not printed


def test_a_ctrl_c_while_workers_start_is_held_then_raised_not_lost():
    """Workers start with SIGINT blocked; this process keeps the Ctrl-C that came meanwhile and
    raises it once the block ends (ignoring SIGINT there instead would lose it: the command would
    go on and exit 0)."""
    import os
    import signal

    import pytest

    from traceanalyzer.interrupts import Interrupted, catch_signals, workers_ignore_ctrl_c

    reached_end_of_block = False
    with pytest.raises(Interrupted) as caught, catch_signals():
        with workers_ignore_ctrl_c():
            os.kill(os.getpid(), signal.SIGINT)
            assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # what a spawned worker inherits
            time.sleep(0.05)
            reached_end_of_block = True
    assert reached_end_of_block and caught.value.exit_code == 130
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _hold_the_write_lock(queue) -> None:
    queue._wlock.acquire()
    time.sleep(600)


def test_a_worker_killed_holding_the_progress_queue_lock_does_not_block_the_end():
    """A rank worker killed while it wrote a progress message keeps the queue's write lock for
    good: telling the listener to end must not wait for that lock for ever (it did, and a test
    run stopped there, in ``queue.put(None)``)."""
    import os
    import signal

    from traceanalyzer.engine.pool import _end_listener

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.SimpleQueue()
    assert _end_listener(queue) is True and queue.get() is None  # the usual case: told
    holder = ctx.Process(target=_hold_the_write_lock, args=(queue,))
    holder.start()
    deadline = time.monotonic() + 60
    while queue._wlock.acquire(timeout=0.05):  # until the worker holds it
        queue._wlock.release()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(10)
    started = time.monotonic()
    assert _end_listener(queue) is False  # not told, and not stuck
    assert time.monotonic() - started < 10
