"""Run one graph of tests/task/test_graph_fuzz.py on the CUDA backend, with variants, and
dump every rank's Python stack if it is still running after DUMP_AFTER seconds.

    python bench/results/2026-12-06-s66/scripts/fuzz_seed.py SEED WORLD_SIZE STEPS [VARIANT...]

VARIANT: as_is, no_trace, no_outline, calls1, drop<k> (without task k). Set
DITRON_WAIT_TIMEOUT for a device wait that names its slot instead of hanging; BACKEND=cpu to
compare with the CPU backend.
"""

from __future__ import annotations

import faulthandler
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "tests", "task"))

import test_graph_fuzz as fuzz  # noqa: E402

import ditron  # noqa: E402


def body(specs: list[dict]) -> list[str]:
    faulthandler.dump_traceback_later(int(os.environ.get("DUMP_AFTER", "60")), exit=False)
    try:
        return fuzz.run_graphs(specs)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other variants go on
        return [f"{type(exc).__name__}: {exc}"]


def variant(spec: dict, how: str) -> dict:
    spec = {**spec, "tasks": list(spec["tasks"])}
    if how == "no_trace":
        spec["trace"] = False
    elif how == "no_outline":
        spec["outline"] = False
    elif how == "calls1":
        spec["calls"] = 1
    elif how.startswith("drop"):
        del spec["tasks"][int(how[4:])]
    return spec


if __name__ == "__main__":
    seed, world, steps = (int(a) for a in sys.argv[1:4])
    base = fuzz.draw_graph(seed, world, steps)
    print(fuzz.describe(base), flush=True)
    for how in sys.argv[4:] or ["as_is"]:
        try:
            got = ditron.launch(body, world, [variant(base, how)],
                                backend=os.environ.get("BACKEND", "cuda"))
            print(how, "->", got, flush=True)
        except Exception as exc:  # noqa: BLE001
            print(how, "-> launch raised", type(exc).__name__, exc, flush=True)
