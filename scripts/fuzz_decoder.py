#!/usr/bin/env python
"""Coverage-guided fuzzing of the compiled Kineto decoder, differential against the Python one.

    python scripts/fuzz_decoder.py --seconds 120

Sets itself up in a scratch folder (``--work``, default ``build/fuzz``): builds the compiled
decoder with clang under AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's coverage
(``-fsanitize=fuzzer-no-link,address,undefined``), installs atheris there when this Python lacks
it, cuts every Kineto trace it finds (the shared recordings beside the repository, the bundled
fixtures) into small seeds, writes a dictionary of Kineto keys, then runs atheris (libFuzzer)
with the ASan runtime preloaded. Every input is checked twice:

* a *piece* (first byte below 0xC0: the rest is a JSON array of events): the compiled decoder
  either leaves it to the Python decoder (None) or gives exactly the frame the Python decoder
  (typed, else dict) gives; where it gives a frame the Python decoder must not refuse;
* a *file* (first byte 0xC0 and up, a parameter byte, then a whole document): the streaming
  reader with tiny blocks and chunks (so every block boundary and chunk cut is exercised),
  optionally as several gzip members, once with each decoder: the same frame, meta and warnings,
  or the same error class. A traceback (an exception that is not one of our errors) is a crash.

Before fuzzing it replays the regression seeds (``tests/data/fuzz``) and cuts a small trace at
every byte (plain, and as gzip members), both decoders on each cut. Prints the executions run,
the coverage and every finding (crash / difference files in ``<work>/findings``); exits 1 when
something was found. ``--replay FILE...`` runs inputs through the checks once, without atheris.
Where clang or atheris is missing it says so and exits 3 (never a silent skip).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# ---- where things are (one place: the package layout may move) -------------------------------
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
DECODER_C = SRC / "traceanalyzer" / "parsers" / "_kineto.c"  # the compiled decoder's source
NATIVE_MODULE = "traceanalyzer.parsers._kineto"  # its import name
CHOOSER_MODULE = "traceanalyzer.parsers.decoder"  # which decoder runs (native / python)
EVENTS_MODULE = "traceanalyzer.parsers.kineto_events"  # the Python decoders of a piece
PARSER_MODULE = "traceanalyzer.parsers.kineto"  # the whole-file (streaming) reader
REGRESSION_SEEDS = ROOT / "tests" / "data" / "fuzz"
TRACE_DIRS = [ROOT.parent / "shared" / "traces", ROOT / "fixtures" / "kineto"]
# -------------------------------------------------------------------------------------------------

FILE_MODE = 0xC0  # first byte at or above: a whole file
MAX_LEN = 4096
SWEEP_LIMIT = 900  # bytes of the trace cut at every byte

KEYS = [
    "traceEvents", "ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s",
    "External id", "external id", "correlation", "stream", "device", "Sequence number",
    "Fwd thread id", "bytes", "Collective name", "In msg nelems", "Out msg nelems", "Group size",
    "dtype", "Process Group Name", "Process Group Description", "Process Group Ranks", "Seq",
    "Src Rank", "Dst Rank", "Input Dims", "Input type", "baseTimeNanoseconds", "deviceProperties",
    "displayTimeUnit", "traceName", "schemaVersion", "distributedInfo", "rank", "world_size",
    "cpu_op", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "user_annotation",
    "gpu_user_annotation", "python_function", "ac2g", "Operator", "Kernel", "Runtime", "Memcpy",
    "ProfilerStep#1", "aten::mm", "aten::linear", "ncclDevKernel_AllReduce", "c10::BFloat16", "float",
]
TOKENS = ['"X"', '"B"', '"E"', '"x"', '"i"', '"M"', '"f"', '"s"', '"C"', "null", "true", "false", "-0",
          "1e308", "1e309", "-1e-320", "9223372036854775807", "9223372036854775808", "-9223372036854775809",
          "0.1", "1.5E+3", '"\\u0000"', '"\\ud800"', '"\\ud83d\\ude00"', '"\\\\"', '"0x0"', "[[1,2],[3]]",
          "[]", "{}", '"\xc3\xa9"', "NaN", "Infinity"]


# ================================================================================================
# the checks (the child process, --replay and the tests run these)


class Difference(AssertionError):
    """The two decoders disagree on an input."""


_state: dict = {}


def use_module(module) -> None:
    """Make ``module`` (an instrumented build, or None for the in-place one) the compiled
    decoder that ``traceanalyzer.parsers.decoder`` hands out."""
    import importlib

    chooser = importlib.import_module(CHOOSER_MODULE)
    if module is None:
        module = importlib.import_module(NATIVE_MODULE)
    sys.modules[NATIVE_MODULE] = module
    chooser._module, chooser._loaded = module, True
    _state["native"] = module


def _modules():
    import importlib

    if "events" not in _state:
        _state["events"] = importlib.import_module(EVENTS_MODULE)
        _state["parser"] = importlib.import_module(PARSER_MODULE)
        if "native" not in _state:
            use_module(None)
    return _state["native"], _state["events"], _state["parser"]


def _same_frame(a, b) -> bool:
    if a.schema != b.schema or a.height != b.height:
        return False
    if a.equals(b):
        return True
    from polars.testing import assert_frame_equal

    try:  # NaN equals NaN here
        assert_frame_equal(a, b, check_exact=True)
    except AssertionError:
        return False
    return True


def reference_piece(piece):
    """The Python decoders' answer for a piece: ``(frame, n, no_ph)`` or the name of the
    refusal (``"malformed"``, ``"utf8"``, ``"deep"``, ``"not objects"``, ``"invalid"``)."""
    import msgspec
    import orjson

    _, ev, _ = _modules()
    try:
        typed = ev.decode_typed(piece)
    except UnicodeDecodeError:
        return "utf8"
    except msgspec.DecodeError:
        return "malformed"
    except RecursionError:
        return "deep"
    if typed is not None:
        return typed
    try:
        events = orjson.loads(piece)
    except orjson.JSONDecodeError:
        return "malformed"
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        return "not objects"
    from traceanalyzer.errors import InvalidTrace

    try:
        return ev.raw_frame_from_dicts(events, Path("piece.json"))
    except InvalidTrace:
        return "invalid"


def check_piece(piece: bytes) -> None:
    """The compiled decoder gives None or exactly the reference's frame."""
    native, ev, _ = _modules()
    got = ev.decode_native(native, piece)
    if got is None:
        return
    ref = reference_piece(piece)
    if isinstance(ref, str):
        raise Difference(f"compiled decoder took a piece the Python decoder refuses ({ref})")
    if got[1] != ref[1] or got[2] != ref[2]:
        raise Difference(f"event counts differ: compiled {got[1:]} python {ref[1:]}")
    if not _same_frame(got[0], ref[0]):
        raise Difference(f"frames differ:\ncompiled {got[0]}\npython {ref[0]}")


def _parse_with(decoder: str, path: Path, block: int, chunk: int):
    from traceanalyzer.errors import TraceAnalyzerError

    _, _, parser = _modules()
    saved = os.environ.get("TRACEANALYZER_DECODER"), parser._BLOCK, parser._CHUNK
    os.environ["TRACEANALYZER_DECODER"] = decoder
    parser._BLOCK, parser._CHUNK = block, chunk
    try:
        return parser.parse_file(path)
    except TraceAnalyzerError as exc:
        return type(exc)
    finally:
        if saved[0] is None:
            os.environ.pop("TRACEANALYZER_DECODER", None)
        else:
            os.environ["TRACEANALYZER_DECODER"] = saved[0]
        parser._BLOCK, parser._CHUNK = saved[1], saved[2]


def check_file(doc: bytes, block: int = 64, chunk: int = 256, members: int = 0, tmp: Path | None = None) -> None:
    """The whole-file reader gives the same frame, meta and warnings (or the same error class)
    with either decoder. ``members``: write the document as gzip members of that many bytes."""
    tmp = tmp or Path(tempfile.gettempdir())
    path = tmp / f"fuzz-{os.getpid()}.json{'.gz' if members else ''}"
    if members:
        data = b"".join(gzip.compress(doc[i : i + members], 1) for i in range(0, max(len(doc), 1), members))
    else:
        data = doc
    path.write_bytes(data)
    try:
        a = _parse_with("native", path, block, chunk)
        b = _parse_with("python", path, block, chunk)
    finally:
        path.unlink(missing_ok=True)
    if isinstance(a, type) or isinstance(b, type):
        if a is not b:
            raise Difference(f"compiled: {getattr(a, '__name__', 'a frame')}, python: {getattr(b, '__name__', 'a frame')}")
        return
    if not _same_frame(a[0], b[0]):
        raise Difference(f"frames differ:\ncompiled {a[0]}\npython {b[0]}")
    if repr(a[1]) != repr(b[1]) or a[2] != b[2]:
        raise Difference(f"meta or warnings differ:\n{a[1:]!r}\n{b[1:]!r}")


def file_params(p: int, q: int) -> tuple[int, int, int]:
    """(block, chunk, gzip member size or 0) from the two parameter bytes of a file input."""
    block = 16 << (p & 7)
    chunk = 64 << ((p >> 3) & 7)
    members = 0 if not (p & 0x40) else 8 + q * 4
    return block, chunk, members


def check_input(data: bytes, tmp: Path | None = None) -> None:
    """One fuzz input: a piece or a whole file (see the module's docstring)."""
    if not data:
        return
    if data[0] < FILE_MODE:
        check_piece(data[1:])
    elif len(data) >= 3:
        block, chunk, members = file_params(data[1], data[2])
        check_file(data[3:], block, chunk, members, tmp)


def sweep(doc: bytes, tmp: Path, members: int = 0, step: int = 1) -> int:
    """Cut ``doc`` at every ``step``-th byte; both decoders on each prefix (the streaming reader
    with 64-byte blocks and 256-byte chunks). Returns the number of cuts."""
    n = 0
    for k in range(0, len(doc) + 1, step):
        check_file(doc[:k], 64, 256, members, tmp)
        n += 1
    return n


# ================================================================================================
# seeds and dictionary


def _trace_files() -> list[Path]:
    out = []
    for d in TRACE_DIRS:
        if d.is_dir():
            out += [p for p in sorted(d.rglob("*.json*")) if p.name.endswith((".json", ".json.gz")) and "truth" not in p.name]
    return out


_EVENT_LINE = re.compile(rb"\n[ \t]*\{")


def _events_text(raw: bytes) -> tuple[bytes, list[bytes], bytes] | None:
    """(head up to the array's "[", the events' texts as written, the tail after "]")."""
    pos = raw.find(b'"traceEvents"')
    if pos < 0:
        return None
    arr = raw.find(b"[", pos)
    starts = [m.start() + 1 for m in _EVENT_LINE.finditer(raw, arr)]
    if not starts:
        return None
    close = raw.rfind(b"]")
    texts = []
    for a, b in zip(starts, [*starts[1:], close]):
        t = raw[a:b].rstrip()
        texts.append(t[:-1] if t.endswith(b",") else t)
    return raw[: arr + 1], texts, raw[close:]


def make_seeds(out: Path, per_trace: int = 12) -> int:
    """Small seeds from every Kineto trace: groups of one to four events of distinct shapes
    (phase, category, args keys), as pieces and as whole small documents."""
    import orjson

    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for path in _trace_files():
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        cut = _events_text(raw)
        if cut is None:
            continue
        head, texts, tail = cut
        if len(head) > 2048:
            head = b'{\n  "schemaVersion": 1,\n  "traceEvents": ['
        if len(tail) > 512:
            tail = b'],\n  "traceName": "x"\n}'
        seen: dict = {}
        for t in texts:
            if len(t) > 1500:
                continue
            try:
                e = orjson.loads(t)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(e, dict):
                continue
            a = e.get("args")
            sig = (e.get("ph"), e.get("cat"), tuple(sorted(a)) if isinstance(a, dict) else None)
            seen.setdefault(sig, t)
            if len(seen) >= per_trace:
                break
        chosen = list(seen.values())
        stem = re.sub(r"[^A-Za-z0-9]+", "_", f"{path.parent.name}_{path.name}")[:60]
        for i in range(0, len(chosen), 3):
            group = chosen[i : i + 3 + (i // 3) % 2]
            piece = b"[\n" + b",\n".join(group) + b"\n]"
            (out / f"{stem}_{i}_piece").write_bytes(b"\x00" + piece)
            doc = head + b"\n" + b",\n".join(group) + b"\n" + tail
            (out / f"{stem}_{i}_file").write_bytes(bytes([FILE_MODE, 0x09, 0x10]) + doc)
            (out / f"{stem}_{i}_gz").write_bytes(bytes([FILE_MODE | 1, 0x49, 0x04]) + doc)
            n += 3
    return n


def write_dict(path: Path) -> None:
    lines = []
    for i, k in enumerate(KEYS):
        lines.append(f'k{i}="\\"{k}\\""')
        lines.append(f'q{i}="\\"{k}\\": "')
    for i, t in enumerate(TOKENS):
        esc = "".join(f"\\x{b:02x}" if b < 0x20 or b > 0x7E or b in (0x22, 0x5C) else chr(b) for b in t.encode())
        lines.append(f't{i}="{esc}"')
    path.write_text("\n".join(lines) + "\n")


def sweep_trace() -> bytes:
    """A small real trace for the byte-by-byte cuts: the first events of the smallest bundled
    trace, cut to about :data:`SWEEP_LIMIT` bytes at an event boundary."""
    src = ROOT / "fixtures" / "kineto" / "mi250_rocm62_minitoy.json.gz"
    head, texts, tail = _events_text(gzip.decompress(src.read_bytes()))
    keep: list[bytes] = []
    for t in texts:
        if sum(map(len, keep)) + len(t) > SWEEP_LIMIT - 200:
            break
        keep.append(t)
    if len(head) > 256:
        head = b'{\n  "schemaVersion": 1,\n  "traceEvents": ['
    return head + b"\n" + b",\n".join(keep) + b"\n" + b'],\n  "traceName": "sweep"\n}'


# ================================================================================================
# set-up: clang, atheris, the instrumented build


def _fail(msg: str) -> None:
    print(f"fuzz_decoder: {msg}", file=sys.stderr)
    sys.exit(3)


def find_atheris(work: Path) -> Path:
    """The folder holding atheris (importable from this Python), installed into ``work/site``
    when this Python has none."""
    probe = "import atheris, os; print(os.path.dirname(os.path.dirname(atheris.__file__)))"
    for extra in ("", str(work / "site")):
        env = {**os.environ, "PYTHONPATH": extra} if extra else os.environ
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
        if r.returncode == 0:
            return Path(r.stdout.strip())
    print("fuzz_decoder: installing atheris into the scratch folder", file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(work / "site"), "atheris"],
                       capture_output=True, text=True)
    if r.returncode:
        _fail(f"could not install atheris (pip install atheris):\n{r.stderr[-2000:]}")
    return work / "site"


def build(work: Path, clang: str) -> Path:
    """The compiled decoder built with ASan + UBSan + libFuzzer coverage, as a loadable module
    (the sanitizer runtimes come from atheris' preloaded ASan library, so none is linked)."""
    import sysconfig

    inc = sysconfig.get_paths()["include"]
    obj, lib = work / "_kineto.o", work / ("_kineto" + sysconfig.get_config_var("EXT_SUFFIX"))
    flags = ["-fPIC", "-O1", "-g", "-std=c11", "-fsanitize=fuzzer-no-link,address,undefined",
             "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", f"-I{inc}"]
    for cmd in ([clang, "-c", *flags, str(DECODER_C), "-o", str(obj)], [clang, "-shared", str(obj), "-o", str(lib)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            _fail(f"building the instrumented decoder failed:\n{' '.join(cmd)}\n{r.stderr[-3000:]}")
    return lib


def load_instrumented(lib: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(NATIVE_MODULE, lib)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ================================================================================================
# the child: atheris over the instrumented build


def child(args, rest: list[str]) -> None:
    import atheris

    sys.setrecursionlimit(1200)
    use_module(load_instrumented(Path(args.lib)))
    _modules()
    tmp = Path(args.tmp)
    if args.sweep:
        t0 = time.time()
        doc = sweep_trace()
        n = sweep(doc, tmp) + sweep(doc, tmp, members=97, step=3)
        print(f"fuzz_decoder: sweep: {n} cuts of a {len(doc)}-byte trace (plain, gzip members), "
              f"both decoders agree ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)

    native = _state["native"]
    every = max(1, args.diff_every)
    count = [0]

    def one(data: bytes) -> None:
        # every input: the compiled decoder under the sanitizers (microseconds); every
        # ``every``-th input that it takes: the full differential (milliseconds: polars)
        if not data:
            return
        body = data[1:] if data[0] < FILE_MODE else data[3:]
        if native.decode(body) is None and data[0] < FILE_MODE:
            return
        count[0] += 1
        if count[0] % every == 0:
            try:
                check_input(data, tmp)
            except BaseException:  # atheris exits without libFuzzer writing the input: keep it
                (tmp.parent / "findings" / f"crash-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
                raise

    atheris.Setup([sys.argv[0], *rest], one)
    atheris.Fuzz()


def replay(paths: list[Path], lib: Path | None, tmp: Path | None) -> int:
    """Every input under ``paths`` through the full checks; the findings are copied to
    ``<tmp>/../findings`` (when ``tmp`` is given) and counted. Returns 1 if any."""
    if lib is not None:
        use_module(load_instrumented(lib))
    sys.setrecursionlimit(1200)
    bad = n = 0
    t0 = time.time()
    for f in paths:
        for p in sorted(f.iterdir()) if f.is_dir() else [f]:
            n += 1
            try:
                check_input(p.read_bytes(), tmp)
            except Exception as exc:  # a finding: report it, go on
                bad += 1
                print(f"fuzz_decoder: replay finding {p.name}: {type(exc).__name__}: {str(exc)[:800]}")
                if tmp is not None:
                    shutil.copy(p, tmp.parent / "findings" / f"diff-{p.name}")
    print(f"fuzz_decoder: replay: {n} inputs through the full differential, {bad} finding(s) "
          f"({time.time() - t0:.0f} s)", flush=True)
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=60, help="how long to fuzz (default 60)")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many executions instead")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz", help="scratch folder")
    ap.add_argument("--diff-every", type=int, default=16,
                    help="the full differential on every N-th input the compiled decoder takes (default 16; "
                    "the corpus is replayed through it in full at the end)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the byte-by-byte cuts of a small trace")
    ap.add_argument("--replay", nargs="+", type=Path, help="run these inputs through the checks once (no atheris)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--lib", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--sweep", action="store_true", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    sys.path.insert(0, str(SRC))
    if args.child:
        child(args, rest)
        return
    if args.replay:
        sys.exit(replay(args.replay, Path(args.lib) if args.lib else None, Path(args.tmp) if args.tmp else None))

    work = args.work.resolve()
    clang = os.environ.get("CLANG_BIN") or os.environ.get("CLANG") or shutil.which("clang")
    if not clang:
        _fail("clang not found (apt-get install clang llvm; or set CLANG_BIN)")
    for d in ("corpus", "seeds", "findings", "tmp"):
        (work / d).mkdir(parents=True, exist_ok=True)
    site = find_atheris(work)
    runtime = site / "asan_with_fuzzer.so"
    if not runtime.exists():
        _fail(f"atheris has no ASan runtime ({runtime})")
    t0 = time.time()
    lib = build(work, clang)
    shutil.rmtree(work / "seeds")
    n_seeds = make_seeds(work / "seeds")
    write_dict(work / "kineto.dict")
    print(f"fuzz_decoder: built {lib.name} with ASan+UBSan+coverage, {n_seeds} seeds "
          f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(site), str(SRC)]),
           "LD_PRELOAD": str(runtime),
           "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:handle_abort=1",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
           "POLARS_MAX_THREADS": "1",
           "TRACEANALYZER_DECODER": "native"}
    corpora = [str(work / "corpus"), str(work / "seeds")]
    if REGRESSION_SEEDS.is_dir():
        corpora.append(str(REGRESSION_SEEDS))
    libfuzzer = [f"-dict={work / 'kineto.dict'}", f"-max_len={MAX_LEN}", "-timeout=60", "-report_slow_units=60", "-rss_limit_mb=6144",
                 f"-artifact_prefix={work / 'findings'}/", "-print_final_stats=1", "-reload=0"]
    libfuzzer.append(f"-runs={args.runs}" if args.runs else f"-max_total_time={args.seconds}")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", f"--lib={lib}", f"--tmp={work / 'tmp'}",
           f"--diff-every={args.diff_every}"]
    if not args.no_sweep:
        cmd.append("--sweep")
    before = set(os.listdir(work / "findings"))
    t1 = time.time()
    log = work / "fuzz.log"
    with open(log, "w") as fh:
        proc = subprocess.run([*cmd, *libfuzzer, *corpora], env=env, stdout=fh, stderr=subprocess.STDOUT)
        # the corpus (every input that reached new code) and the seeds, in full
        rp = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--replay", *corpora, f"--lib={lib}",
                             f"--tmp={work / 'tmp'}"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if line.startswith("fuzz_decoder:"):
            print(line)
    stats = dict(re.findall(r"^stat::(\w+):\s*(\d+)", text, re.M))
    cov = re.findall(r"cov: (\d+) ft: (\d+)", text)
    corp = re.findall(r"corp: (\d+)/", text)
    # crashes, differences, timeouts, memory blow-ups (a slow unit on a busy machine is not one)
    new = sorted(f for f in set(os.listdir(work / "findings")) - before if not f.startswith("slow-unit-"))
    print(f"executions: {stats.get('number_of_executed_units', '?')} in {time.time() - t1:.0f} s "
          f"({stats.get('average_exec_per_sec', '?')}/s); coverage: {cov[-1][0] if cov else '?'} edges, "
          f"{cov[-1][1] if cov else '?'} features; corpus {corp[-1] if corp else '?'} inputs; "
          f"peak RSS {stats.get('peak_rss_mb', '?')} MB")
    if proc.returncode or rp.returncode or new:
        tail = "\n".join(text.splitlines()[-60:])
        print(f"FOUND: exit {proc.returncode}/{rp.returncode}; findings: {', '.join(new) or 'none written'}\n{tail}")
        print(f"(full log: {log})")
        sys.exit(1)
    print("findings: none")


if __name__ == "__main__":
    main()
