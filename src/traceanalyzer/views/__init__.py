"""Reports: a report model (every number, computed once) and the annotated-trace writer.

* :func:`traceanalyzer.views.document.build` — an :class:`~traceanalyzer.classify.Analysis` -> the
  report model, a plain JSON-ready ``dict`` (schema in ``docs/report-schema.md``). The renderers in
  :mod:`traceanalyzer.render` (``plots``, ``html``, ``markdown``) only format it.
* :func:`traceanalyzer.views.runs.bucket_runs` — per rank and step, the maximal runs of one bucket
  (also importable from ``document``); the model's sections come from ``headline``, ``causes``,
  ``kernelrows``, ``reconciled``, ``timelines`` and ``crossrank``.
* :mod:`traceanalyzer.views.annotate` — the original trace plus one track per rank that shows
  those runs in Perfetto / chrome://tracing (:func:`~traceanalyzer.views.annotate.add_tracks`,
  given the document the API read; the rebuilt traces of Nsight Systems input or ``--merge``).
"""
