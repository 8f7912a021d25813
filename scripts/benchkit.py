"""What the benchmarks that replay rank results in fresh processes share (``bench_reduce.py``,
``bench_replay.py``): the child's resident-memory probe, put into the child's code, and the
runner that starts a child and reads the JSON line it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

#: ``rss_kb()`` in a child's code: its resident memory now, KiB (Linux)
RSS_KB = '''
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
'''


def run_json(args: list[str]) -> dict:
    """Run ``python -c *args`` with the package of this tree; the JSON of its last line."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, env=env, check=False)
    if out.returncode:
        raise SystemExit(f"benchmark process failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])
