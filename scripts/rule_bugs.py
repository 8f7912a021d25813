"""Break each documented rule on purpose, one at a time, and check that its named test fails.

Each entry replaces one line of the product code (the rule), runs the tests of tests/test_rules.py
that guard it, and puts the line back (also when interrupted). Prints CAUGHT or MISSED per rule;
exits 1 when any is missed. Usage, from the repository root:

    python scripts/rule_bugs.py            # every rule
    python scripts/rule_bugs.py "compute over recompute"
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
BUGS = [
    ("record_param_comms", "src/traceanalyzer/classify/labels.py",
     'is_comm = is_kernel & (pl.col("__by_name") | pl.col("__comm_link").fill_null(False))',
     'is_comm = is_kernel & pl.col("__by_name")',
     ["tests/test_rules.py::test_rule_kernel_launched_under_record_param_comms_is_communication",
      "tests/test_rules.py::test_rule_record_param_comms_on_the_demo_trace_with_its_collectives_renamed"]),
    ("compute over recompute", "src/traceanalyzer/classify/partition.py",
     '''        pl.when(pl.col("n_compute") > 0)
        .then(pl.lit("compute"))
        .when(pl.col("n_recompute") > 0)
        .then(pl.lit("recompute"))''',
     '''        pl.when(pl.col("n_recompute") > 0)
        .then(pl.lit("recompute"))
        .when(pl.col("n_compute") > 0)
        .then(pl.lit("compute"))''',
     ["tests/test_rules.py::test_rule_compute_wins_over_recompute"]),
    ("MFU from hardware FLOPs", "src/traceanalyzer/reconciliation/waterfall.py",
     "F = Fraction(fl.model / gpus)", "F = Fraction(fl.hardware / gpus)",
     ["tests/test_rules.py::test_rule_mfu_is_from_model_flops_not_hardware_flops"]),
    ("model FLOPs count recompute", "src/traceanalyzer/model/flops.py",
     "return self.attn_linear + self.attn_core + self.mlp + self.logits",
     "return self.attn_linear + self.attn_core + self.mlp + self.logits + self.recompute",
     ["tests/test_rules.py::test_rule_model_flops_exclude_recompute_in_the_transformer_formula",
      "tests/test_rules.py::test_rule_mfu_is_from_model_flops_not_hardware_flops"]),
    ("attention backward 2x", "src/traceanalyzer/classify/shapes.py",
     'return OpCost("attention", 2 * b * h * lq * lk * (3 * d + 2 * dv), 2 * elements)',
     'return OpCost("attention", 2 * fwd, 2 * elements)',
     ["tests/test_rules.py::test_rule_attention_backward_is_two_and_a_half_forwards"]),
    ("launch never binds", "src/traceanalyzer/classify/critical_path/cpgraph.py",
     '(pl.col("prev_end").is_null() | (pl.col("launch_start") > pl.col("prev_end")))',
     'pl.col("prev_end").is_null()',
     ["tests/test_rules.py::test_rule_critical_path_launch_binding"]),
    ("launch always binds", "src/traceanalyzer/classify/critical_path/cpgraph.py",
     '(pl.col("prev_end").is_null() | (pl.col("launch_start") > pl.col("prev_end")))',
     'pl.lit(True)',
     ["tests/test_rules.py::test_rule_critical_path_launch_binding"]),
]
only = sys.argv[1:]
missed = []
for name, rel, old, new, tests in BUGS:
    if only and name not in only:
        continue
    p = ROOT / rel
    text = p.read_text()
    assert text.count(old) == 1, (name, text.count(old))
    p.write_text(text.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                           capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(ROOT)])})  # the edited tree
    finally:
        p.write_text(text)
    last = r.stdout.strip().splitlines()[-1]
    print(f"{name:32s} -> {'CAUGHT' if r.returncode == 1 else 'MISSED'} ({last})")
    if r.returncode != 1:
        missed.append(name)
sys.exit(1 if missed else 0)
