"""How the package runs its polars queries.

Polars 2 made its streaming engine the default for ``LazyFrame.collect()``. The package's queries
are many small plans (a few hundred per rank, each over at most a rank's events); on them the
streaming engine costs about twice the CPU of the in-memory engine for the same result, so every
query of the package asks for the in-memory engine by name (``collect(engine=ENGINE)``). The
setting is per call: a caller's own polars configuration (``pl.Config.set_engine_affinity``) is
neither read nor changed.
"""

#: the polars engine of every ``collect`` in the package
ENGINE = "in-memory"
