"""Choosing how an op runs: measured decisions, cached on disk, with a cost model before them.

- ``tuner``: ``tune(op, M, N, K)`` enumerates a TP GEMM's candidates (method, engine,
  chunking, tiles), times each the same number of times on every rank, agrees, and keeps an
  overlapped one only if it beats the plain fallback by ``MARGIN``. Its timing protocol is
  the one every tuner uses (``task/tp_mlp_tuner.py`` too).
- ``decisions``, ``cache``: the decisions the ops read (``method="auto"``), kept on disk
  keyed by op, shapes, dtype, world size, device, ``b``'s layout, the operands' alignment
  class, whether a GPU world checks its calls (debug mode), the GEMMs' load path where
  ``DITRON_GEMM_TMA`` departs from the device's default, and the triton, torch and Ditron
  versions (Ditron's with a digest of its sources). ``method="auto"`` keeps the decision
  it takes per call signature in a world, and takes it again when those settings change
  or after ``tune``.
- ``cost_model``: a roofline estimate used where nothing is tuned yet.
"""
