"""s53c: the gather kernels of this tree against ``--old REV``'s (session 52: c28433d) on
``gather_sweep.py``'s cases; inputs, checks and timing as ``gather_ab.py``."""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import subprocess

import ditron.kernels.gather_sum as tree

HERE = pathlib.Path(__file__).resolve().parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--old", default="c28433d")
    args = p.parse_args()
    ab, sweep = _load("gather_ab"), _load("gather_sweep")
    text = subprocess.run(["git", "show", f"{args.old}:ditron/kernels/gather_sum.py"],
                          check=True, capture_output=True, text=True).stdout
    old = ab._variant("gather_old", text.replace("from ..runtime", "from ditron.runtime"))
    print("kernel T k N | old us | new us | new/old")
    for T, k, N in sweep.CASES:
        inputs = ab._inputs(T, k, N)
        src, idx, src2, idx2, w, g = inputs
        for kern, call in ab._calls(*inputs).items():
            a, b = call(old), call(tree)
            err = (a.float() - b.float()).abs().max() / a.float().abs().max()
            assert err < 1e-2, (kern, float(err))
            us = ab.timed({"old": lambda c=call: c(old), "new": lambda c=call: c(tree)})
            print(f"{kern} {T} {k} {N} | {us['old']:.1f} | {us['new']:.1f} | "
                  f"{us['new'] / us['old']:.3f}", flush=True)


if __name__ == "__main__":
    main()
