"""CLI commands: one module per command, each exposing ``register(app)``."""
