"""Independent, plain-Python recompute marking straight from the raw Kineto JSON (tests only).

A per-thread stack walk (the obvious, loop-based way) over the complete events: signal 1 of
kineto_format.md section 2 (forward-style op with Sequence number and Fwd thread id 0 inside an
``autograd::engine::evaluate_function`` range) plus everything under ``CheckpointFunctionBackward``
that is not a nested backward node; SAC cache hits (only detach / empty PythonDispatchMode
below) and bare detaches excluded.
"""

from __future__ import annotations

import gzip
from collections import defaultdict

import orjson

DETACHISH = {"aten::detach", "detach", "PythonDispatchMode", "aten::alias"}


def load(path):
    return orjson.loads(gzip.open(path).read())


def trees(doc):
    """Per thread: list of nodes (dict with name, ts, end, args, cat, children, parent)."""
    by_thread = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"):
            ts = round(float(e["ts"]) * 1000)
            by_thread[(str(e["pid"]), str(e["tid"]))].append(
                {"name": e.get("name", ""), "ts": ts, "end": ts + round(float(e.get("dur", 0)) * 1000),
                 "args": e.get("args", {}), "cat": e["cat"], "children": [], "parent": None, "tid": str(e["tid"])}
            )
    out = {}
    for key, nodes in by_thread.items():
        nodes.sort(key=lambda n: (n["ts"], -n["end"]))
        stack = []
        for n in nodes:
            while stack and stack[-1]["end"] <= n["ts"] and not (stack[-1]["end"] == n["ts"] == stack[-1]["ts"]):
                stack.pop()
            while stack and stack[-1]["end"] < n["end"]:
                stack.pop()
            if stack:
                n["parent"] = stack[-1]
                stack[-1]["children"].append(n)
            stack.append(n)
        out[key] = nodes
    return out


def descendants(n):
    out = []
    todo = list(n["children"])
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c["children"])
    return out


def ancestors(n):
    p = n["parent"]
    while p is not None:
        yield p
        p = p["parent"]


def is_backward(name):
    return name.startswith("autograd::") or "Backward" in name


def noop(n):
    if n["name"] in DETACHISH:
        return True
    d = descendants(n)
    return bool(d) and all(c["name"] in DETACHISH for c in d) and any(c["name"] == "PythonDispatchMode" for c in d)


def recomputed(doc):
    """(every recomputed host node, the top-level ones)."""
    roots = []
    for nodes in trees(doc).values():
        for n in nodes:
            anc = list(ancestors(n))
            a = n["args"]
            sig1 = (
                n["cat"] == "cpu_op" and a.get("Sequence number") is not None and a.get("Fwd thread id") == 0
                and not is_backward(n["name"])
                and any(p["name"].startswith("autograd::engine::evaluate_function") for p in anc)
            )
            sig2 = False
            for i, p in enumerate(anc):
                if p["name"] in ("CheckpointFunctionBackward", "_CheckpointFunctionBackward"):
                    sig2 = not any(is_backward(q["name"]) for q in [n, *anc[:i]])
                    break
            if (sig1 or sig2) and not noop(n):
                roots.append(n)
    root_ids = {id(n) for n in roots}
    top = [n for n in roots if not any(id(p) in root_ids for p in ancestors(n))]
    every = []
    for r in top:
        todo = [r]
        while todo:
            n = todo.pop()
            if noop(n):
                continue
            every.append(n)
            todo.extend(n["children"])
    return every, top


def recompute_gpu_ns(doc, kinds=("kernel",)):
    """Summed duration (ns) of GPU work launched by recomputed host nodes."""
    every, _ = recomputed(doc)
    ext = {n["args"]["External id"] for n in every if n["cat"] in ("cpu_op", "user_annotation") and "External id" in n["args"]}
    corr = {n["args"]["correlation"] for n in every if n["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in n["args"]}
    total = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in kinds:
            a = e.get("args", {})
            if a.get("correlation") in corr or a.get("External id") in ext:
                total += round(float(e["dur"]) * 1000)
    return total
