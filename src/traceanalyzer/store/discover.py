"""Find the runs under a root: run id, job, date and trace files of each.

A *run* is one job's traces of one night:

* a directory holding trace files (its rank traces, analysed together; its other files, such as
  ``config.json``, ``metrics.json``, logs and checkpoints, are not part of the run), found at any
  depth (``DATE/JOB/``, ``JOB/DATE/``, ``JOB/`` alike: no manifest needed), or
* one trace file, when the trace files of a directory each carry a date in their name
  (``2026-11-19.json.gz``, ``2026-11-20.json.gz``: one run per file), or when a file is given
  as a root.

Directories are searched recursively; names starting with ``.`` or ``_`` are skipped, and so are
symbolic links to directories (a ``loop -> ..`` link would never end, a ``latest -> night-42``
link would name a run twice); a root named on the command line may itself be a link. A symbolic
link to a trace file is a trace file (a dangling one too: its run fails, naming it). Identity,
from the name unless a manifest says otherwise:

* **date**: ``YYYY-MM-DD``, ``YYYY_MM_DD`` or ``YYYYMMDD`` anywhere in the run's name; else in
  the name of the nearest directory above it (``2026-11-20/llama/``); else the manifest's ``date``; else (filled in after parsing) the trace's own start time, else the
  file's modification time — see :func:`fallback_date`.
* **job**: the name with the date and its separators removed (``llama-nightly-2026-11-20`` →
  ``llama-nightly``); when nothing is left (``2026-11-20``), the parent directory's name.
* **run id**: the run's name (a file's name without the trace suffix) when it says more than the
  date, else ``<job>/<name>`` (``dlrm/2026-11-20``); ``<job>/<dated directory>`` when the date
  comes from the directory above (``2026-11-20/dlrm/`` is ``dlrm/2026-11-20`` too). It does not depend on which root was given.

A manifest ``traceanalyzer-run.toml`` in a run directory overrides any of ``run_id``, ``date``,
``job``, and may name a run ``config`` (a ``run.toml`` for MFU, relative to the manifest) and a
``step_range``. A manifest that cannot be used (invalid TOML, an unknown key, a bad date, a
``config`` that does not exist), or a directory that cannot be listed, does not stop the
discovery: that run gets ``error`` set (its identity then comes from its name) and the batch
records it as a failed run.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.errors import ConfigError, InputNotFound
from traceanalyzer.parsers import TRACE_SUFFIXES
from traceanalyzer.parsers.sniff import not_a_trace

MANIFEST = "traceanalyzer-run.toml"

_DATE = re.compile(r"(?<!\d)(\d{4})[-_]?(\d{2})[-_]?(\d{2})(?!\d)")


@dataclass(frozen=True)
class RunSpec:
    """One run to analyse: what the engines ship to a worker (plain, picklable data)."""

    run_id: str
    job: str
    date: str | None  # ISO date, or None until the trace tells it (see fallback_date)
    path: str  # the run directory, or the single trace file
    files: tuple[str, ...]
    config: str | None = None  # run.toml for MFU (manifest, else --config)
    step_range: str | None = None
    manifest: dict = field(default_factory=dict, compare=False, hash=False)
    manifest_path: str | None = None  # the run's manifest file, if it has one
    error: str | None = None  # set when the run cannot be analysed at all (bad manifest, unreadable)
    error_class: str | None = None  # ConfigError or InputNotFound, with ``error``


def parse_date(name: str) -> tuple[str | None, str]:
    """(ISO date found in ``name`` or None, ``name`` with that date and its separators removed)."""
    for m in _DATE.finditer(name):
        try:
            day = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            continue
        rest = (name[: m.start()] + "-" + name[m.end():]).strip("-_. ")
        rest = re.sub(r"[-_.]{2,}", "-", rest)
        return day.isoformat(), rest
    return None, name


def _strip_suffix(name: str) -> str:
    low = name.lower()
    for suf in sorted(TRACE_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            name = name[: -len(suf)]
            break
    return re.sub(r"\.pt\.trace$", "", name)


def _is_trace(p: Path) -> bool:
    """Named like a trace and not a JSON document of another kind (``config.json``,
    ``metrics.json``, ``truth.json``: :func:`~traceanalyzer.parsers.sniff.not_a_trace`)."""
    if not p.name.lower().endswith(TRACE_SUFFIXES) or p.name == MANIFEST:
        return False
    if p.is_symlink() and not p.exists():
        return True  # dangling: kept, so that it is named
    return p.is_file() and not_a_trace(p) is None


def _is_subdir(p: Path) -> bool:
    return not p.name.startswith((".", "_")) and not p.is_symlink() and p.is_dir()


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        return {}
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"not a valid run manifest: {exc}", path) from exc
    unknown = set(doc) - {"run_id", "date", "job", "config", "step_range"}
    if unknown:
        raise ConfigError(f"unknown manifest key(s) {sorted(unknown)}: expected run_id, date, job, config, step_range", path)
    if "date" in doc:
        value = doc["date"]
        try:
            doc["date"] = (value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))).isoformat()
        except ValueError as exc:
            raise ConfigError(f"manifest date {value!r} is not YYYY-MM-DD", path) from exc
    if "config" in doc:
        cfg = directory / str(doc["config"])
        if not cfg.is_file():
            raise ConfigError(f"the manifest's config {str(doc['config'])!r} is not a file", path)
        doc["config"] = str(cfg.resolve())
    return doc


def _dated_ancestor(d: Path, root: Path) -> str | None:
    """The name of the nearest directory above ``d`` (up to ``root`` itself) that carries a date:
    the night of a ``DATE/JOB/`` layout."""
    for parent in d.parents:
        if parse_date(parent.name)[0]:
            return parent.name
        if parent == root or parent == parent.parent:
            return None
    return None


def _spec(name: str, parent_name: str, path: Path, files: list[Path], manifest: dict, config: str | None,
          error: Exception | None = None, dated_parent: str | None = None) -> RunSpec:
    date, rest = parse_date(name)
    job = str(manifest.get("job", rest if date and rest else (name if not date else parent_name or name)))
    run_id = name if (not date or rest) else f"{job}/{name}"
    if date is None and dated_parent is not None:  # DATE/JOB/: the night from the directory above
        date = parse_date(dated_parent)[0]
        run_id = f"{job}/{dated_parent}"
    return RunSpec(
        run_id=str(manifest.get("run_id", run_id)),
        job=job,
        date=manifest.get("date", date),
        path=str(path),
        files=tuple(str(f) for f in files),
        config=manifest.get("config", config),
        step_range=manifest.get("step_range"),
        manifest=manifest,
        manifest_path=str(path / MANIFEST) if path.is_dir() and (path / MANIFEST).is_file() else None,
        error=str(error) if error is not None else None,
        error_class=type(error).__name__ if error is not None else None,
    )


def discover_runs(roots: list[Path], exclude: Path | None = None, config: str | None = None) -> list[RunSpec]:
    """Every run under ``roots`` (sorted by date, then run id); ``exclude`` (the store) is skipped."""
    runs: list[RunSpec] = []
    excluded = exclude.resolve() if exclude is not None else None
    for root in roots:
        root = Path(root)
        if not root.exists():
            raise InputNotFound("no such file or directory", root)
        if root.is_file():
            runs.append(_spec(_strip_suffix(root.name), root.resolve().parent.name, root, [root], {}, config))
            continue
        stack = [root]
        seen: set[tuple[int, int]] = set()
        while stack:  # directories, not events: a walk over the tree
            d = stack.pop()
            real = d.resolve()
            if excluded is not None and real == excluded:
                continue
            try:
                st = d.stat()
                if (st.st_dev, st.st_ino) in seen:  # a bind mount looping back: never twice
                    continue
                seen.add((st.st_dev, st.st_ino))
                entries = sorted(d.iterdir())
            except OSError as exc:
                if d == root:
                    raise InputNotFound(f"cannot read: {exc.strerror or exc}", d) from exc
                err = InputNotFound(f"cannot list this directory: {exc.strerror or exc}", d)
                runs.append(_spec(real.name, real.parent.name, d, [], {}, config, err))
                continue
            traces = [p for p in entries if _is_trace(p)]
            if traces:
                try:
                    manifest, error = read_manifest(d), None
                except ConfigError as exc:
                    manifest, error = {}, exc
                dated = [parse_date(_strip_suffix(p.name))[0] for p in traces]
                if error is None and not manifest and len(traces) > 1 and all(dated) and len(set(dated)) == len(dated):
                    runs.extend(_spec(_strip_suffix(p.name), real.name, p, [p], {}, config) for p in traces)
                else:
                    runs.append(_spec(real.name, real.parent.name, d, traces, manifest, config, error,
                                      _dated_ancestor(d, root) if d != root else None))
            stack.extend(p for p in reversed(entries) if _is_subdir(p))
    if not runs:
        raise InputNotFound("no trace files found under " + ", ".join(str(r) for r in roots))
    seen: dict[str, str] = {}
    for r in runs:
        if r.run_id in seen:
            raise ConfigError(
                f"run id {r.run_id!r} names two runs ({seen[r.run_id]} and {r.path}): "
                f"give one of them a {MANIFEST} with its own run_id"
            )
        seen[r.run_id] = r.path
    return sorted(runs, key=lambda r: (r.date or "", r.run_id))


def fallback_date(base_time_ns: int | None, files: tuple[str, ...]) -> str:
    """A run whose name and manifest carry no date: the trace's start (UTC), else the newest mtime."""
    if base_time_ns and base_time_ns > 946_684_800 * 10**9:  # an epoch time after 2000-01-01
        return dt.datetime.fromtimestamp(base_time_ns / 1e9, tz=dt.timezone.utc).date().isoformat()
    stamps = []
    for f in files:
        try:
            stamps.append(Path(f).stat().st_mtime)
        except OSError:  # a dangling link: the newest of the others
            pass
    if not stamps:
        return dt.datetime.now(dt.timezone.utc).date().isoformat()
    mtime = max(stamps)
    return dt.datetime.fromtimestamp(mtime, tz=dt.timezone.utc).date().isoformat()
