"""The compiled Kineto decoder (traceanalyzer._kineto) is optional: without a C compiler the
install still succeeds and the Python decoder runs (``traceanalyzer --version`` says which)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceanalyzer._kineto",
            ["traceanalyzer/_kineto.c"],
            extra_compile_args=["-std=c11", "-O2"],
            optional=True,
        )
    ]
)
