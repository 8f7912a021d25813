"""The package's version, in a module of its own: the modules that stamp it on their outputs
import it from here, not from the package root (which lists the public API)."""

__version__ = "0.1.0"
