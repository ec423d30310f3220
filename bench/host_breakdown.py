"""Where an op's host time goes, by function: each listed function is wrapped with a host
timer (inclusive: nested wrapped calls count in both), the op is called back to back
``--calls`` times on every rank after a warm-up, and rank 0 prints microseconds per op call
for each function and for the whole call. No device synchronisation inside the timed loop.

    python bench/host_breakdown.py [--world-size 2] [--calls 100] [--encode-every-launch]

``--encode-every-launch``: launch kernels that take host TMA descriptors as Triton does,
encoding each descriptor at every launch, not once per distinct value (for an A/B).
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import sys
import time

import torch

import ditron

#: (module, attribute) pairs to time; "Class.method" names a method
WRAPPED = [
    ("ditron.ops.tp_gemm", "_validate"), ("ditron.ops.tp_gemm", "_choose"),
    ("ditron.ops.tp_gemm", "_ag_workspace"), ("ditron.ops.tp_gemm", "signal_pad"),
    ("ditron.ops.tp_gemm", "_traced_launch"), ("ditron.ops.tp_gemm", "launch_gemm"),
    ("ditron.ops.tp_gemm", "_after_launch"), ("ditron.kernels.gemm", "gemm_launch"),
    ("ditron.plan.lowering", "engine_transfers"),
    ("ditron.engines.copy_engine", "CopyEngine.issue"),
    ("ditron.engines.copy_engine", "CopyEngine.drain"),
    ("ditron.engines.copy_engine", "_endpoints"),
    ("ditron.engines.sync", "notify_one"), ("ditron.engines.sync", "wait_one"),
    ("ditron.ops.exchange", "notify_peers"), ("ditron.ops.exchange", "wait_slots"),
    ("ditron.ops.exchange", "open_exchange"), ("ditron.ops.exchange", "Call.push"),
    ("ditron.ops.exchange", "Call.wait"), ("ditron.ops.exchange", "Call.finish"),
    ("ditron.ops.exchange", "reduce_slots"), ("ditron.ops.collectives", "_engine"),
    ("ditron.ops.collectives", "agree"), ("ditron.ops.tp_gemm", "agree"),
    ("ditron.kernels.fused_collective", "launch"),
    # the chunked GEMM-RS paths (ops/rs_copy_engine.py), by the names they are called by
    ("ditron.ops.rs_copy_engine", "pushed"), ("ditron.ops.rs_copy_engine", "pulled"),
    ("ditron.ops.rs_copy_engine", "_open_segments"), ("ditron.ops.tp_gemm", "notify_one"),
    ("ditron.ops.exchange", "Chunked.wait"),
    ("ditron.ops.exchange", "Chunked.free"), ("ditron.ops.exchange", "Chunked.finish"),
    ("ditron.engines.copy_engine", "CopyEngine.mark"),
    ("ditron.engines.copy_engine", "_issue_raw"), ("torch", "matmul"), ("torch", "empty"),
    ("torch", "Tensor.addmm_"),
]
#: Triton's own launch path (CUDA only): what of ``JITFunction.run`` is not listed below is
#: its argument binder and checks
TRITON_WRAPPED = [
    ("triton.runtime.jit", "JITFunction.run"), ("triton.runtime.jit", "compute_cache_key"),
    ("triton.compiler.compiler", "CompiledKernel.launch_metadata"),
    ("triton.backends.nvidia.driver", "CudaLauncher.__call__"),
    ("triton.backends.nvidia.driver", "make_tensordesc_arg"),
    ("triton.tools.tensor_descriptor", "TensorDescriptor.__post_init__"),
]
_TOTALS: collections.Counter = collections.Counter()


def _timed(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _TOTALS[name] += time.perf_counter() - t0
    return wrapper


def _wrap_all(cuda: bool) -> list[str]:
    """Wrap every listed function that exists; return those that do not (renamed since)."""
    missing = []
    for module_name, attr in WRAPPED + (TRITON_WRAPPED if cuda else []):
        module = importlib.import_module(module_name)
        owner, _, name = attr.rpartition(".")
        target = getattr(module, owner, None) if owner else module
        if target is None or not hasattr(target, name):
            missing.append(f"{module_name}.{attr}")
            continue
        setattr(target, name, _timed(attr, getattr(target, name)))
    return missing


def _ops(m: int, n: int, k: int):
    from host_profile import _tp_impls  # bench/ is the script's folder

    w = ditron.world()
    x = torch.randn(2048, device=w.device, dtype=torch.bfloat16)
    wanted = ("ag_gemm/overlap", "gemm_rs/copy_engine", "gemm_rs/copy_engine 4 chunks",
              "gemm_rs/copy_engine_pull", "gemm_rs/copy_engine_pull 4 chunks",
              "gemm_rs/colocated")
    return [impl for impl in _tp_impls(m, n, k) if impl[0] in wanted] + [
        ("all_gather/sm 4K", lambda: ditron.ops.all_gather(x, engine="sm")),
        ("all_gather/copy_engine 4K", lambda: ditron.ops.all_gather(x, engine="copy_engine"))]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _run(calls: int, shape: tuple[int, int, int], encode_every_launch: bool = False) -> None:
    import torch.distributed as dist

    from ditron.runtime import triton_launch
    from ditron.runtime.world import current

    if encode_every_launch:
        triton_launch._encoding_cached = lambda launcher: launcher

    missing = _wrap_all(torch.cuda.is_available())
    rank = ditron.world().rank
    if missing and rank == 0:
        print(f"not timed (no longer there): {', '.join(missing)}", flush=True)
    for label, fn in _ops(*shape):
        for _ in range(3):
            fn()
        _sync()
        dist.barrier(group=current().host_group)
        _TOTALS.clear()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        total = time.perf_counter() - t0
        _sync()
        if rank == 0:
            print(f"== {label}: {total / calls * 1e6:.1f} us host per call", flush=True)
            for name, t in _TOTALS.most_common():
                print(f"   {name:<28}{t / calls * 1e6:9.1f} us", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--shape", default="8192,11008,4096", help="M,N,K of the TP GEMMs")
    p.add_argument("--encode-every-launch", action="store_true")
    args = p.parse_args()
    w = args.world_size or max(2, torch.cuda.device_count())
    shape = tuple(int(v) for v in args.shape.split(","))
    ditron.launch(_run, w, args.calls, shape, args.encode_every_launch, backend=args.backend)
    return 0


if __name__ == "__main__":
    sys.exit(main())
