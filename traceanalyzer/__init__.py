"""traceanalyzer: where did my MFU go?"""

__version__ = "0.1.0"
