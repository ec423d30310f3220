"""``ditron bench tp-mlp`` (``ditron/benchmarks/tp_mlp.py``), kept under this path for the
commands recorded in docs/perf.md and bench/results."""

from ditron.benchmarks.tp_mlp import main

if __name__ == "__main__":
    raise SystemExit(main())
