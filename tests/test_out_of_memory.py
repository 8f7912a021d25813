"""Memory that runs out is reported as such (exit 10, docs/errors.md), with what the file needs:
never as "invalid JSON", never a crash. The caps are set with ``resource.setrlimit(RLIMIT_AS)``
(what ``ulimit -v`` sets, as HPC login nodes do) in a subprocess, on a trace made by
scripts/make_big_trace.py from the MI300X demo fixture (two copies, about 30 MB of JSON).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import DEMO, ROOT
from traceanalyzer.errors import EXIT_CODES, OutOfMemory
from traceanalyzer.parsers.kineto import WHOLE_DOCUMENT_FACTOR

resource = pytest.importorskip("resource", reason="no RLIMIT_AS on this platform")

# in a fresh process: cap the address space when the whole document is about to be decoded, at
# what the process holds then plus CAP x the JSON (the whole-document reader asks for 8x)
SCRIPT = r"""
import os, resource, sys
from traceanalyzer.parsers import kineto
cap = float(sys.argv[1])
real = kineto.decode_document
def capped(raw, path, cut, *a, **k):
    used = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    lim = used + int(cap * len(raw))
    resource.setrlimit(resource.RLIMIT_AS, (lim, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(f"json={len(raw)}", file=sys.stderr)
    return real(raw, path, cut, *a, **k)
kineto.decode_document = capped
from traceanalyzer.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    out = tmp_path_factory.mktemp("big") / "big.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_trace.py"), "--source", str(DEMO), "--copies", "2",
                    "-o", str(out)], check=True, capture_output=True, cwd=ROOT)
    return out


def _run(cap: float, *args):
    return subprocess.run([sys.executable, "-c", SCRIPT, str(cap), *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_exit_10_is_documented():
    assert OutOfMemory.exit_code == 10 and 10 in EXIT_CODES
    assert "| 10 |" in (ROOT / "docs" / "errors.md").read_text()


def test_annotate_under_an_address_space_cap_says_memory_ran_out_and_how_much_it_needs(tmp_path, big):
    r = _run(3, "annotate", big, "-o", tmp_path / "out.json")
    size = int(r.stderr.split("json=")[1].split()[0])
    assert size > 25_000_000
    assert r.returncode == 10, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("traceanalyzer: error")]
    assert len(lines) == 1 and "Traceback" not in r.stderr and "invalid JSON" not in r.stderr
    need = WHOLE_DOCUMENT_FACTOR * size
    assert lines[0].startswith(
        f"traceanalyzer: error: {big}: not enough memory to read the whole document: {size / 1e6:,.0f} MB of JSON "
        f"needs about {need / 1e9:.1f} GB more while it is decoded, and the address-space limit (ulimit -v) leaves "
    )
    assert "raise it to at least" in lines[0] and "(ulimit -v " in lines[0]
    assert not (tmp_path / "out.json").exists()
    # with the room it asks for (plus what writing the output takes), the same command succeeds
    ok = _run(WHOLE_DOCUMENT_FACTOR + 4, "annotate", big, "-o", tmp_path / "out.json")
    assert ok.returncode == 0, ok.stderr
    import orjson

    written = orjson.loads((tmp_path / "out.json").read_bytes())["traceEvents"]
    assert len(written) > len(orjson.loads(big.read_bytes())["traceEvents"])  # the input's events and the tracks


def test_a_failed_allocation_is_out_of_memory_exit_10_not_invalid_json(tmp_path, big, monkeypatch):
    # an allocation failure the check before decoding did not foresee (no limit it could see: the
    # machine's memory): orjson reports it as a JSONDecodeError saying "not enough memory"; it is
    # out of memory naming the file, never "invalid JSON that could not be recovered"
    from traceanalyzer.parsers import kineto

    monkeypatch.setattr(kineto, "check_memory", lambda size, path: None)
    raw = big.read_bytes()
    with pytest.raises(OutOfMemory, match="ran out of memory reading the whole document"):
        try:
            import orjson

            real = orjson.loads

            def failing(data):
                raise orjson.JSONDecodeError("Not enough memory to allocate", "", 0)

            monkeypatch.setattr(kineto.orjson, "loads", failing)
            kineto.decode_document(raw, big, False)
        finally:
            monkeypatch.setattr(kineto.orjson, "loads", real)


def test_any_other_memory_error_is_one_line_exit_10(monkeypatch, capsys):
    # an allocation that fails anywhere else (here: while the trace is loaded)
    from traceanalyzer import engine
    from traceanalyzer.cli import main

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(engine, "analyse", no_memory)
    monkeypatch.setattr("traceanalyzer.commands.common.analyse_paths", no_memory, raising=False)
    rc = main(["breakdown", str(DEMO), "-q"])
    err = capsys.readouterr().err
    assert rc == 10, err
    assert err.strip().splitlines() == [
        "traceanalyzer: error: out of memory: give the command more memory (ulimit -v, the job's memory limit) "
        "or fewer --workers"
    ]


@pytest.mark.parametrize("version, factor", [("3.8.0", 8), ("3.10.18", 8), ("3.11.0", 18), ("3.13.0", 18), ("4.0.1", 18)])
def test_the_factor_follows_the_orjson_that_reserves_a_parse_buffer(version, factor):
    # measured (see whole_document_factor): orjson 3.11.0 crashes with 15x the JSON left and 3.10
    # succeeds from 7.2x; the check asks for a margin above each
    from traceanalyzer.parsers.kineto import whole_document_factor

    assert whole_document_factor(version) == factor
