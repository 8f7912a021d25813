"""``python -m traceanalyzer``: signals are handled from the first moment (before the heavy
imports), then the command line runs."""

from traceanalyzer.interrupts import exit_on_signals


def entry() -> None:
    exit_on_signals()
    from traceanalyzer.cli import run

    run()


if __name__ == "__main__":
    entry()
