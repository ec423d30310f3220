"""``ditron bench megakernel`` (``ditron/benchmarks/megakernel.py``), kept under this path for the
commands recorded in docs/perf.md and bench/results."""

from ditron.benchmarks.megakernel import main

if __name__ == "__main__":
    raise SystemExit(main())
