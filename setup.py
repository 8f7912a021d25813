"""The compiled Kineto decoder (traceanalyzer.parsers._kineto) is optional: without a C compiler
the install still succeeds and the Python decoder runs (``traceanalyzer --version`` says which)."""

import sys

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceanalyzer.parsers._kineto",
            ["src/traceanalyzer/parsers/_kineto.c"],
            extra_compile_args=[] if sys.platform == "win32" else ["-std=c11"],
            optional=True,  # no compiler, or a failed build: a warning, and the install goes on
        )
    ]
)
