"""The GPU's default tiles, run by the interpreter and compiled for sm_90 without spills.

CPU runs take small tiles (a program is a NumPy call), so the tiles a GPU runs would meet
only GPU tests. Here the interpreter runs the persistent GEMM and the grouped GEMM (forward
and weight gradient) with the GPU's default configs and TMA loads, on shapes that do not
divide into those tiles (the CI's compile check then compiles these launches for sm_90),
and ``ptxas`` checks that none of those launches, nor the overlapped TP GEMMs' (their
waits and epilogues, on two ranks) or the device all-to-all's copies (narrow and wide
rows), spills registers (a few bytes allowed:
``ALLOWED_SPILL``), for operands laid out as a model's (sizes of a multiple of 16) and for
those that are not, on which the default configs take smaller tiles: a spill cost the
GPU up to 2x where it went unnoticed (sessions 52-54).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch

import ditron
from ditron.kernels import descriptors, gemm
from ditron.kernels import grouped_gemm as gg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CUDA = torch.device("cuda", 0)  # only to pick the GPU's configs: nothing runs on it
DTYPES = (torch.bfloat16, torch.float32)
#: (M or rows, N, K): sizes as a model's (multiples of 16: aligned rows; K = 192 whole K
#: blocks, which the grouped GEMM's row-major TMA weight needs), and sizes that are not.
#: Spills depend on that: Triton specializes sizes by divisibility by 16, and loads that
#: cannot be vectorized take the smaller tiles of ``kernels/alignment.py``
SHAPES = {True: (200, 320, 192), False: (131, 257, 100)}
#: (m per rank, N, K) of the TP GEMMs: K not a multiple of a block; unaligned: bf16 rows of
#: K = 200 (400 bytes) load through TMA, fp32 ones through pointers, N = 257 partials
TP_SHAPES = {True: (136, 320, 208), False: (136, 257, 200)}


def as_h200() -> None:
    """Make the configs' and load paths' choices for ``CUDA`` as on an H200 (capability 9.0:
    TMA loads where operands allow) on this machine, which has no GPU."""
    descriptors.capability = lambda device: (9, 0)


def _offsets(R: int) -> tuple[int, ...]:
    """Three groups, one empty; the last ``19`` rows belong to none (they keep their
    contents)."""
    return 0, R // 3, R // 3, R - 19


def _error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.double() - ref).abs().max() / ref.abs().max())


def _gemm_case(dtype: torch.dtype, aligned: bool, transposed: bool):
    M, N, K = SHAPES[aligned]
    a = torch.randn(M, K, dtype=dtype)
    b = torch.randn(N, K, dtype=dtype).t() if transposed else torch.randn(K, N, dtype=dtype)
    cfg = gemm.default_config(CUDA, dtype, (a, b))
    c = torch.full((M, N), float("nan"), dtype=dtype)
    order = gemm.cached_linear_order(M, N, cfg, c.device)
    gemm.launch_gemm(a, b, c, M, order=order, seg_rows=M, cfg=cfg, use_tma=True)
    return c, a.double() @ b.double()


def _grouped_case(dtype: torch.dtype, aligned: bool, transposed: bool,
                  rows_per_group: float | None):
    R, N, K = SHAPES[aligned]
    bounds = _offsets(R)
    offsets = torch.tensor(bounds)
    G = len(bounds) - 1
    x = torch.randn(R, K, dtype=dtype)
    w = (torch.randn(G, N, K, dtype=dtype).transpose(1, 2) if transposed
         else torch.randn(G, K, N, dtype=dtype))
    cfg = gg.default_config(CUDA, dtype, rows_per_group, (x, w))
    out = torch.full((R, N), float("nan"), dtype=dtype)
    gg.grouped_gemm(x, w, offsets, out=out, config=cfg)
    ref = torch.full((R, N), float("nan"), dtype=torch.float64)
    for g in range(G):
        lo, hi = bounds[g], bounds[g + 1]
        ref[lo:hi] = x[lo:hi].double() @ w[g].double()
    return out, ref


def _wgrad_case(dtype: torch.dtype, aligned: bool):
    R, N, K = SHAPES[aligned]
    cfg = gg.default_wgrad_config(CUDA, dtype)
    bounds = _offsets(R)
    offsets = torch.tensor(bounds)
    x, dy = torch.randn(R, K, dtype=dtype), torch.randn(R, N, dtype=dtype)
    out = torch.full((len(bounds) - 1, K, N), float("nan"), dtype=dtype)
    gg.grouped_gemm_wgrad(x, dy, offsets, out=out, config=cfg)
    ref = torch.stack([x[lo:hi].double().t() @ dy[lo:hi].double()
                       for lo, hi in zip(bounds, bounds[1:], strict=False)])
    return out, ref


def cases(aligned: bool) -> dict[str, Callable[[], tuple[torch.Tensor, torch.Tensor]]]:
    """Each kernel and GPU default config on operands ``aligned`` or not, by name: a
    function returning ``(output, float64 reference)`` (NaN where the output must keep
    its poison)."""
    out = {}
    for dtype in DTYPES:
        dn = str(dtype).removeprefix("torch.")
        for transposed in (False, True):
            layout = "w.t()" if transposed else "row-major"
            out[f"gemm {dn} b {layout}"] = (
                lambda d=dtype, t=transposed: _gemm_case(d, aligned, t))
            groups = {"many rows": None, "few rows": 16} if dtype != torch.float32 else \
                {"fp32": None}
            for name, rows in groups.items():
                out[f"grouped {dn} {name} w {layout}"] = (
                    lambda d=dtype, t=transposed, r=rows: _grouped_case(d, aligned, t, r))
        out[f"wgrad {dn}"] = lambda d=dtype: _wgrad_case(d, aligned)
    return out


def _tp_ops(aligned: bool) -> bool:
    """The overlapped TP GEMMs on the GPU's default configs for their operands with each
    engine a GPU tunes over (``tune.tuner.GPU_ENGINES``; a rank of a launch) and the
    colocated pull (AG-GEMM across nodes): the persistent GEMM with its waits, own rows in
    place, A rows from the peers' heaps and its reduce-scatter / all-reduce epilogues."""
    from ditron.tune.tuner import GPU_ENGINES, MATMUL_ENGINES

    as_h200()
    W = ditron.world().world_size
    m, N, K = TP_SHAPES[aligned]
    for dtype in DTYPES:
        a = torch.randn(m, K).to(dtype)
        b = torch.randn(N, K).to(dtype).t()
        a2 = torch.randn(W * m, K).to(dtype)
        block_m = gemm.default_config(CUDA, dtype, (a, b)).block_m
        whole = torch.randn(2 * block_m, K).to(dtype)  # own rows read in place (OWN_A)
        for op, args in (("ag_gemm", (a, b)), ("ag_gemm", (whole, b)), ("gemm_rs", (a2, b))):
            epilogue = gemm.EPI_REDUCE_SCATTER if op == "gemm_rs" else gemm.EPI_STORE
            cfg = gemm.default_config(CUDA, dtype, args, epilogue)
            for engine in GPU_ENGINES[op]:
                if engine not in MATMUL_ENGINES.get(op, ()):
                    getattr(ditron.ops, op)(*args, method="overlap", config=cfg,
                                            engine=engine)
        cfg = gemm.default_config(CUDA, dtype, (a, b), gemm.EPI_ALL_REDUCE)
        ditron.ops.gemm_ar(a, b, method="overlap", config=cfg)
        cfg = gemm.default_config(CUDA, dtype, (a, b), a_remote=True)  # across nodes
        ditron.ops.ag_gemm(a, b, method="overlap", config=cfg, engine="colocated")
    return True


#: row widths (bf16 elements) of the device all-to-all's copy tiles: narrow ones (their
#: tiles hold fewer elements), wide ones and a model's hidden size
A2A_ROWS = (8, 24, 100, 256, 7168)


def _a2a_ops() -> bool:
    """The device all-to-all's copy kernels at the GPU's tiles (``TILE_COLS``), for rows of
    :data:`A2A_ROWS`: plain, then with send and receive indices, row scales, zeroed misses
    and a 56-float companion row (a 7168-wide row's fp8 scales); the plain call's rows are
    checked."""
    from ditron.ops import a2a_device

    a2a_device.TILE_COLS["cpu"] = a2a_device.TILE_COLS["cuda"]
    W, me = ditron.world().world_size, ditron.world().rank
    splits = torch.full((W,), 3, dtype=torch.int64)
    for row in A2A_ROWS:
        x = torch.arange(3 * W * row, dtype=torch.float32).add(1000 * me).view(3 * W, row)
        x = x.to(torch.bfloat16)
        out, _ = ditron.ops.all_to_all_device(x, splits, 3 * W)
        want = torch.cat([torch.arange(3 * W * row, dtype=torch.float32).add(1000 * q)
                          .view(3 * W, row)[3 * me:3 * me + 3] for q in range(W)])
        assert torch.equal(out.float(), want.to(torch.bfloat16).float()), row
        index = torch.arange(3 * W - 1, -1, -1)
        scale = torch.linspace(0.5, 2.0, 3 * W)
        ditron.ops.all_to_all_device(x, splits, 3 * W, send_index=index, recv_index=index,
                                     send_scale=scale, zero_missing=True)
        ditron.ops.all_to_all_device_pair(x, torch.randn(3 * W, 56), splits, 3 * W,
                                          send_index=index, recv_index=index)
    return True


def run_cases(aligned: bool) -> None:
    """Run :func:`cases` and the TP GEMMs on two ranks (for the recording the spill check
    compiles), and once (``aligned``) the device all-to-all's copies."""
    as_h200()
    for fn in cases(aligned).values():
        fn()
    assert ditron.launch(_tp_ops, 2, aligned, backend="cpu") == [True, True]
    if aligned:
        assert ditron.launch(_a2a_ops, 2, backend="cpu") == [True, True]


@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
def test_gpu_default_tiles_in_the_interpreter(aligned, monkeypatch):
    monkeypatch.setenv("DITRON_GEMM_TMA", "1")  # the GPU's load path (where operands allow)
    monkeypatch.setattr(descriptors, "capability", lambda device: (9, 0))  # as_h200
    torch.manual_seed(0)
    for name, fn in cases(aligned).items():
        got, ref = fn()
        keep = ref.isnan()
        assert got[keep].isnan().all(), f"{name}: wrote rows outside its groups"
        tol = 2e-2 if got.dtype == torch.bfloat16 else 1e-5
        err = _error(got[~keep], ref[~keep])
        assert err < tol, f"{name}: relative error {err:.2e}"


_COMPILE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1] + "/tools")
    import cuda_compile_check as check  # switches the backend off the interpreter
    launches, _ = check.distinct_launches(sys.argv[2])
    out = [{"error": error, "usage": u and [u.kernel, u.constexprs, u.registers, u.spilled]}
           for error, u in check.compile_all(launches, registers=1)]
    print(json.dumps(out))
""")


def test_gpu_default_tiles_compile_without_spills(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    record = dict(env, TRITON_INTERPRET="1", DITRON_GEMM_TMA="1", DITRON_BACKEND="cpu",
                  DITRON_RECORD_LAUNCHES=str(tmp_path))
    script = ("from tests.kernels.test_gpu_tiles import run_cases; run_cases(aligned=True); "
              "run_cases(aligned=False)")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=record,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-c", _COMPILE, ROOT, str(tmp_path)], cwd=ROOT,
                          env=dict(env, DITRON_BACKEND="cuda"), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launches = json.loads(proc.stdout.strip().splitlines()[-1])
    failed = [r["error"] for r in launches if r["error"]]
    assert not failed, "\n".join(failed)
    used = [r["usage"] for r in launches]  # [kernel, constexprs, registers, spilled]
    kernels = {kernel.split(":")[1] for kernel, *_ in used}
    assert {"persistent_gemm", "_grouped_gemm_kernel", "_grouped_wgrad_kernel",
            "_data_kernel", "_finish_kernel"} <= kernels
    for variant in ("WAIT=True", "OWN_A=True", "A_REMOTE=True", "EPILOGUE=1", "EPILOGUE=2"):
        assert any(variant in consts for _, consts, *_ in used), variant
    spilled = [f"{kernel} ({consts}): {spill} B spilled, {regs} registers"
               for kernel, consts, regs, spill in used
               if spill > _allowed_spill(consts)]
    assert not spilled, "\n".join(spilled)


#: spill bytes allowed per thread by a launch of the persistent GEMM with these switches
#: (sm_90a): the all-reduce epilogue holds its reduced tile while pushing it to every peer
#: (session 54: 8-80 B at both dtypes' default tiles); the consumer's wait prologue with
#: fp32 rows of 200 elements, 4 B, and the colocated pull's, 16 B (session 55); every
#: other launch here must not spill
ALLOWED_SPILL = {"EPILOGUE=2": 128, "WAIT=True": 8, "A_REMOTE=True": 16}


def _allowed_spill(constexprs: str) -> int:
    return max((limit for switch, limit in ALLOWED_SPILL.items()
                if re.search(rf"\b{switch}\b", constexprs)), default=0)
