"""s53a: ``sort_copies`` at decode sizes (the placement summing the block histograms
itself, ``NB > 0``) at a git revision against this tree's: session 52's
``routing_ab.py`` with other cases."""

from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
S52 = HERE.parents[1] / "2026-12-04-h200-s52" / "scripts" / "routing_ab.py"

#: (tokens, k, experts, W): every case folds (blocks x bins <= FOLD_BINS), the last two not
CASES = [(16, 8, 64, 8), (64, 8, 64, 8), (128, 8, 64, 8), (256, 8, 64, 8), (512, 8, 64, 8),
         (128, 8, 32, 8), (64, 8, 128, 8), (128, 8, 256, 8), (8192, 8, 64, 8)]

if __name__ == "__main__":
    # session 52's main with its case list swapped for CASES
    text = S52.read_text().replace(
        "for T, k, E, W in [(128, 8, 64, 8), (8192, 8, 64, 8), (8192, 8, 256, 8),\n"
        "                       (128, 8, 256, 8), (32768, 8, 64, 8), (8192, 8, 128, 8)]:",
        "for T, k, E, W in CASES:")
    assert "CASES" in text
    ns = {"__name__": "routing_ab_decode", "CASES": CASES}
    exec(compile(text, str(S52), "exec"), ns)
    sys.argv[0] = str(S52)
    ns["main"]()
