"""Nsight Systems CUDA memory-usage events -> one polars frame.

``nsys profile --cuda-memory-usage=true`` records every device allocation and free the CUDA
driver sees (``cudaMalloc`` / ``cudaFree`` and the like) in the SQLite export's
``CUDA_GPU_MEMORY_USAGE_EVENTS`` table: start (ns, session clock), globalPid, deviceId, address,
bytes, memKind (2 = device memory), memoryOperationType (0 allocation, 1 free). A PyTorch
process allocates through its caching allocator, so these are the allocator's *reserved*
segments plus what NCCL, cuBLAS and the CUDA libraries allocate themselves.

Public surface: :func:`read_nsys_memory` (SQLite export -> frame of :data:`NSYS_MEMORY_SCHEMA`,
``bytes`` signed: negative for a free). Other export formats are not read for memory.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from traceanalyzer.errors import InvalidTrace

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
#: memKind values that are device memory: Device, Device Static
DEVICE_KINDS = (2, 5)
NSYS_MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "pid": pl.Int64, "device_id": pl.Int32, "ts_ns": pl.Int64, "addr": pl.Int64, "bytes": pl.Int64,
}


def read_nsys_memory(path: str | Path) -> pl.DataFrame:
    """Device allocations and frees of an nsys SQLite export, in time order; ``pid`` is the OS
    process id (the ``pid`` of the trace's CUDA API events). Empty when the table is absent."""
    path = Path(path)
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidTrace(f"cannot open the SQLite export ({exc})", path) from None
    try:
        has = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone()
        if not has:
            return pl.DataFrame(schema=NSYS_MEMORY_SCHEMA)
        kinds = ", ".join(map(str, DEVICE_KINDS))
        rows = con.execute(
            f"SELECT (globalPid / 16777216) % 16777216, deviceId, start, address, "
            f"CASE WHEN memoryOperationType = 1 THEN -bytes ELSE bytes END "
            f"FROM {TABLE} WHERE memKind IN ({kinds}) AND start IS NOT NULL AND bytes IS NOT NULL ORDER BY start"
        ).fetchall()
    except sqlite3.Error as exc:
        raise InvalidTrace(f"cannot read {TABLE} ({exc})", path) from None
    finally:
        con.close()
    return pl.DataFrame(rows, schema=NSYS_MEMORY_SCHEMA, orient="row")
