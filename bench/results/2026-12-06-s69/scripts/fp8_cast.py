"""How Triton 3.6 casts fp32 to fp8 on this GPU, against torch's round-to-nearest: the
default cast, rtne, and through fp16 / bf16. Prints per variant and fp8 dtype how many of
the values differ from torch and the worst relative error."""
import torch
import triton
import triton.language as tl


@triton.jit
def _cast(x, out, n, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n)
    if MODE == 0:
        y = v.to(out.dtype.element_ty)
    elif MODE == 1:
        y = v.to(out.dtype.element_ty, fp_downcast_rounding="rtne")
    elif MODE == 2:
        y = v.to(tl.float16).to(out.dtype.element_ty)
    else:
        y = v.to(tl.bfloat16).to(out.dtype.element_ty)
    tl.store(out + offs, y, mask=offs < n)


g = torch.Generator().manual_seed(0)
x = torch.cat([torch.tensor([1.998, -0.485, 0.3, 1.9375, 0.96875]),
               torch.randn(100000, generator=g) * 4]).cuda()
for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
    want = x.to(dtype).float()
    for mode, name in enumerate(("default", "rtne", "via fp16", "via bf16")):
        out = torch.empty(x.numel(), dtype=dtype, device="cuda")
        try:
            _cast[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), MODE=mode, BLOCK=1024)
        except Exception as e:  # noqa: BLE001
            print(f"{dtype} {name}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        got = out.float()
        bad = (got != want)
        rel = ((got - want).abs() / want.abs().clamp_min(1e-6))[bad]
        print(f"{dtype} {name}: {int(bad.sum())} of {x.numel()} differ, worst rel "
              f"{float(rel.max()) if bad.any() else 0:.3f}; first five {got[:5].tolist()} "
              f"want {want[:5].tolist()}")
