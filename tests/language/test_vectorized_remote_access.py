"""Remote loads and stores compile to the same vector width as local ones.

Compiled for sm_90 without a GPU (``tools/cuda_compile_check.py``'s stand-in driver): a
contiguous bf16 block read from or written to a peer through ``ditron.language`` must use
16-byte accesses. A translation that goes through integers loses the compiler's contiguity
and alignment facts and falls back to 2-byte accesses, which over NVLink cost an order of
magnitude in bandwidth; that is what this test keeps out. The fused collectives and the
GEMM-RS epilogue and the SM engine (with 16-byte aligned transfers) are checked the same way.
"""

from __future__ import annotations

import textwrap

from ..cuda_script import run_as_cuda

_COMPILE = textwrap.dedent("""
    import collections, json, re, sys
    sys.path.insert(0, sys.argv[1] + "/tools")
    import cuda_compile_check as check  # switches the backend off the interpreter
    from triton.runtime import driver
    driver.set_active(check._Hopper())
    import torch, triton, triton.language as tl
    import ditron.language as dl
    from ditron.kernels import fused_collective as kfc, gemm
    from ditron.runtime.dtypes import tl_accumulator
    from ditron.language.context import DeviceContext

    @triton.jit
    def remote_copy(x, y, peer, ctx, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        dl.store(y + offs, dl.load(x + offs, peer, ctx), peer, ctx)

    @triton.jit
    def block_peers(x, y, ctx, BLOCK: tl.constexpr):
        r = tl.arange(0, 2)
        c = tl.arange(0, BLOCK)
        peers = (ctx.rank + 1 + r) % ctx.world_size
        v = dl.load(x + r[:, None] * BLOCK + c[None, :], peers[:, None], ctx)
        tl.store(y + r[:, None] * BLOCK + c[None, :], v)

    def widths(kernel):
        ptx = kernel.asm["ptx"]
        return dict(collections.Counter(re.findall(r"(?:ld|st)\\.global\\.(?:v\\d\\.)?b\\d+", ptx)))

    ctx = DeviceContext(torch.zeros(2, dtype=torch.int64), 0, 2,
                        torch.zeros(8, dtype=torch.int64), 0)
    bf = torch.bfloat16
    out = {}
    x, y = torch.empty(4096, dtype=bf), torch.empty(4096, dtype=bf)
    out["remote_copy"] = widths(remote_copy.warmup(x, y, 3, ctx, BLOCK=1024, grid=(1,)))
    n = 1 << 16
    xs, o = torch.empty(n, dtype=bf), torch.empty(2 * n, dtype=bf)
    buf, pad = torch.empty(2, 4 * n, dtype=bf), torch.zeros(64, dtype=torch.int64)
    ep = torch.zeros(16, dtype=torch.int64)
    for push in (False, True):
        k = kfc.fused_collective_kernel.warmup(
            xs, o, buf, pad, ep, n, n // 2, n // 2, 4096, 4 * n, 2 * n, n, ctx, BLOCK=4096,
            MODE=kfc.TWO_SHOT, WORLD=2, PUSH=push, ACC=tl_accumulator(bf),
            OP=kfc.REDUCTIONS["sum"], grid=(1,), num_warps=8)
        out["fused_two_shot_" + ("push" if push else "pull")] = widths(k)
    M, N, K = 512, 512, 512
    a, b = torch.empty(M, K, dtype=bf), torch.empty(N, K, dtype=bf).t()
    c = torch.empty(M // 2, N, dtype=bf)
    hooks = gemm.GemmHooks(epilogue=gemm.EPI_REDUCE_SCATTER,
                           recv=torch.empty(2, M // 2, N, dtype=bf),
                           rs_sig=torch.zeros(64, dtype=torch.int64), epoch=1)
    cfg = gemm.default_config(torch.device("cuda"), bf)
    grid, args, kw = gemm.gemm_launch(a, b, c, M, order=torch.zeros(8, dtype=torch.int32),
                                      seg_rows=M // 2, cfg=cfg, hooks=hooks, ctx=ctx, use_tma=True)
    kw["GPU_TIMER"], kw["UPCAST"] = True, False
    out["gemm_rs_epilogue"] = widths(gemm.persistent_gemm.warmup(*args, grid=(1,), **kw))
    from ditron.engines import sm
    desc, cnt = torch.zeros(14, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    out["sm_engine"] = widths(sm._move_kernel.warmup(desc, x, cnt, cnt, 1, ctx, BLOCK=2048,
                                                     REDUCE=False, VEC=8, ACC=tl.float32,
                                                     grid=(1, 1),
                                                     num_warps=8))
    block_peers.warmup(x, y, ctx, BLOCK=1024, grid=(1,))  # a block of peers compiles too
    print(json.dumps(out))
""")


def test_remote_accesses_compile_to_16_byte_vectors(tmp_path):
    found = run_as_cuda(_COMPILE, file=tmp_path / "compile_remote_access.py")
    for kernel, counts in found.items():
        narrow = {op: k for op, k in counts.items() if op.endswith(".b16")}
        assert not narrow, f"{kernel}: 2-byte global accesses {narrow} (all: {counts})"
        assert any(op.startswith(("ld.global.v4", "st.global.v4")) for op in counts), \
            f"{kernel}: no 16-byte accesses ({counts})"
