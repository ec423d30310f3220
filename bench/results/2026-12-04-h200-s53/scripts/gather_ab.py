"""s53a: ``kernels.gather_sum``'s two kernels with their copy loop unrolled
(``tl.static_range(K)``, as in the tree) against a runtime loop (``range(K)``), on one GPU:
the combine's two-source reads (half the copies in ``src``, half in ``src2``), hidden 7168,
top-8, bf16. Outputs compared with each other and with torch; CUDA graphs of 20 calls each
replayed in turns over 9 rounds (medians, microseconds per call, warm-up excluded)."""

from __future__ import annotations

import importlib.util
import pathlib
import statistics

import torch

import ditron.kernels.gather_sum as tree

UNROLLED = "for j in tl.static_range(K):"


def _variant(name: str, text: str):
    path = pathlib.Path(f"/tmp/{name}.py")
    path.write_text(text)  # triton.jit reads the source from the file
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _graph(fn, calls=20):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    return g


def timed(fns: dict, rounds: int = 9) -> dict:
    """Microseconds per call of each ``fns`` value: CUDA graphs of 20 calls replayed in
    turns over ``rounds`` rounds, medians."""
    graphs = {n: _graph(f) for n, f in fns.items()}
    times = {n: [] for n in graphs}
    for _ in range(rounds):
        for n, gr in graphs.items():
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            gr.replay()
            e1.record()
            e1.synchronize()
            times[n].append(e0.elapsed_time(e1) * 1000 / 20)
    return {n: statistics.median(t) for n, t in times.items()}


def _inputs(T: int, k: int, N: int):
    n = T * k
    src = torch.randn(n, N, device="cuda", dtype=torch.bfloat16)
    src2 = torch.randn(n, N, device="cuda", dtype=torch.bfloat16)
    first = torch.rand(T, k, device="cuda") < 0.5
    idx = torch.where(first, torch.randperm(n, device="cuda").view(T, k), -1)
    idx2 = torch.where(first, -1, torch.randperm(n, device="cuda").view(T, k))
    w = torch.rand(T, k, device="cuda")
    g = torch.randn(T, N, device="cuda", dtype=torch.bfloat16)
    return src, idx, src2, idx2, w, g


def _calls(src, idx, src2, idx2, w, g) -> dict:
    """Each kernel's call on these inputs, given the module that runs it."""
    return {
        "sum": lambda m: m.weighted_gather_sum(src, idx, w, src2=src2, idx2=idx2),
        "dot": lambda m: m.gather_dot(src, idx, g, src2=src2, idx2=idx2),
    }


def main() -> None:
    text = pathlib.Path(tree.__file__).read_text()
    text = text.replace("from ..runtime", "from ditron.runtime")
    assert text.count(UNROLLED) == 2
    loop = _variant("gather_loop", text.replace(UNROLLED, "for j in range(K):"))
    mods = {"unrolled": tree, "loop": loop}
    print("kernel T k N | unrolled us | loop us | loop/unrolled")
    for T, k, N in [(128, 8, 7168), (1024, 8, 7168), (8192, 8, 7168), (8192, 6, 2048)]:
        args = _inputs(T, k, N)
        src, idx, src2, idx2, w, g = args
        rows = torch.where((idx >= 0)[..., None], src[idx.clamp(min=0)].float(),
                           src2[idx2.clamp(min=0)].float())
        refs = {"sum": (rows * w[..., None]).sum(1), "dot": (rows * g.float()[:, None]).sum(-1)}
        for kern, call in _calls(*args).items():
            outs = {n: call(m) for n, m in mods.items()}
            for n, o in outs.items():
                err = (o.float() - refs[kern]).abs().max() / refs[kern].abs().max()
                assert err < 2e-2, (kern, n, float(err))
            us = timed({n: (lambda m=m, c=call: c(m)) for n, m in mods.items()})
            u, lp = us["unrolled"], us["loop"]
            print(f"{kern} {T} {k} {N} | {u:.1f} | {lp:.1f} | {lp / u:.3f}", flush=True)


if __name__ == "__main__":
    main()
