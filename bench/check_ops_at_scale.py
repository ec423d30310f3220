"""Correctness of every op at one world size on the cuda backend, with the CPU tests' checks.

Runs, at ``--world-size`` ranks (default: one per GPU, at least 2; ranks share GPUs when
there are fewer): the collectives against torch.distributed (every engine and ``auto``,
3 dtypes, uneven and zero all-to-all splits, repeated calls), ``all_to_all_device``, the
fused all-reduce (sizes that do not divide, repeated calls), and the TP GEMMs (tiles that
straddle chunks; ``overlap``, plus ``fallback`` when every rank has its own GPU) and their
graph-safe variants. Prints one line per family and exits non-zero on the first failure.
``--only`` runs some of the families: ``collectives``, ``fused`` (the fused kernels and
``all_to_all_device``) and ``tp`` (the TP GEMMs, eager and graph-safe).

    python bench/check_ops_at_scale.py [--world-size W] [--backend cpu] [--only tp,...]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

import ditron

FAMILIES = {"collectives", "fused", "tp"}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--only", default="collectives,fused,tp",
                   help="families to run, comma-separated")
    args = p.parse_args()
    only = set(args.only.split(","))
    unknown = only - FAMILIES
    if unknown:
        p.error(f"--only: unknown families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    backend = args.backend
    W = args.world_size or max(2, torch.cuda.device_count())
    shared = backend == "cpu" or W > torch.cuda.device_count()
    if "collectives" in only:
        _collectives(W, shared, backend)
    if "fused" in only:
        _fused(W, backend)
    if "tp" in only:
        _tp(W, shared, backend)
    return 0


def _collectives(W: int, shared: bool, backend: str) -> None:
    from tests.ops import test_collectives as coll

    engines = ("copy_engine", "sm", None) + (() if shared else ("network",))
    checks = ditron.launch(coll.check_ops, W, engines, backend=backend)
    print(f"collectives W={W} engines={engines}: {checks[0]} checks per rank, all passed")


def _fused(W: int, backend: str) -> None:
    from tests.ops import test_collectives as coll
    from tests.ops import test_fused_collectives as fused

    checks = ditron.launch(coll.check_all_to_all_device, W, 7, backend=backend)
    print(f"all_to_all_device W={W}: {checks[0]} checks per rank, all passed")
    for push, block in (("0", ""), ("1", ""), ("1", "4096"), ("0", "4096")):
        os.environ["DITRON_FUSED_PUSH"], os.environ["DITRON_FUSED_BLOCK"] = push, block
        checks = ditron.launch(fused._rank_sizes_and_repeats, W, backend=backend)
        print(f"fused all_reduce, all_gather, reduce_scatter, all_to_all W={W} push={push} "
              f"block={block or 'auto'}: {checks[0]} checks per rank, all passed")
    del os.environ["DITRON_FUSED_PUSH"], os.environ["DITRON_FUSED_BLOCK"]
    checks = ditron.launch(fused._rank_large, W, backend=backend)
    print(f"fused collectives, 1-40 MB inputs, default variants W={W}: {checks[0]} checks "
          f"per rank, all passed")


def _tp(W: int, shared: bool, backend: str) -> None:
    from tests.ops import test_tp_gemm as tp

    methods = ["overlap"] if shared else ["overlap", "fallback"]
    specs = [(torch.bfloat16, 3, methods), (torch.float32, 2, ["overlap"])]
    checks = ditron.launch(tp._ops_case, W, 300, 256, 384, specs, backend=backend)
    print(f"ag_gemm / gemm_rs / gemm_ar W={W} methods={methods}: {checks[0]} checks per "
          f"rank, all passed")
    checks = ditron.launch(tp._engines_case, W, 300, 256, 384, 2, backend=backend)
    print(f"ag_gemm engines and chunkings, gemm_rs copy-engine chunkings W={W}: {checks[0]} "
          f"checks per rank, all passed")
    checks = ditron.launch(tp._pulled_case, W, 300, 256, 384, 2, backend=backend)
    print(f"gemm_rs copy_engine_pull (fp32, bf16; chunkings) W={W}: {checks[0]} checks "
          f"per rank, all passed")
    checks = ditron.launch(tp._graph_safe_case, W, 300, 256, 384, 2, not shared,
                           backend=backend)
    print(f"graph-safe ag_gemm / gemm_rs / gemm_ar (device epochs) W={W}: {checks[0]} "
          f"checks per rank, all passed")


if __name__ == "__main__":
    sys.exit(main())
