"""Time a sequence-parallel MLP (``ditron.nn``) against the same layers on cuBLAS + NCCL.

    python -m ditron bench tp-mlp --world-size 2 --shape 8192,4096,11008 --out mlp.json

The MLP is ``RowParallelLinear(gelu(ColumnParallelLinear(x)))`` with ``x`` this rank's
``[tokens / W, hidden]`` rows, bf16. Variants, timed in the same processes in rounds whose
order rotates (``tune.tuner.rotations``): ``fallback`` (every op ``method="fallback"``:
``torch.matmul`` + ``torch.distributed``, Megatron-LM's non-overlapped sequence
parallelism) and ``overlap`` (``method="auto"``: the tuned or modelled choice, which the op
may resolve to the fallback), each as a forward pass alone (``no_grad``) and as a training
step (forward, backward of a fixed output gradient; the gradients accumulate, no
optimizer step). Per-call times are the slower
rank's median of batches of ``--batch`` steps (CUDA events, fixed counts on every rank),
warm-up excluded. On the CPU backend (``--smoke``) it runs tiny shapes, to check the
script; its times mean nothing.
"""

from __future__ import annotations

import argparse

import torch

import ditron
from ditron.benchmarks import provenance, write_json
from ditron.runtime.arguments import (
    add_timing_options,
    int_list,
    output_file,
    positive_int,
    smoke_defaults,
)
from ditron.tune.tuner import agreed_median, time_in_rounds

VARIANTS = {"fallback": "fallback", "overlap": "auto"}


def _measure(tokens: int, hidden: int, ffn: int, warmup: int, iters: int, batch: int,
             rounds: int) -> dict:
    from ditron import nn

    w = ditron.world()
    W, dev = w.world_size, w.device
    dtype = torch.bfloat16
    torch.manual_seed(w.rank)
    x = torch.randn(tokens // W, hidden, device=dev, dtype=dtype, requires_grad=True)
    gy = torch.randn(tokens // W, hidden, device=dev, dtype=dtype)  # the output's gradient
    layers = {}
    for name, method in VARIANTS.items():
        col = nn.ColumnParallelLinear(hidden, ffn, bias=False, method=method, dtype=dtype)
        row = nn.RowParallelLinear(ffn, hidden, bias=False, method=method, dtype=dtype)
        layers[name] = (col, row)

    def forward(name):
        col, row = layers[name]

        def run():
            with torch.no_grad():
                row(torch.nn.functional.gelu(col(x)))
        return run

    def step(name):
        col, row = layers[name]

        def run():
            row(torch.nn.functional.gelu(col(x))).backward(gy)
        return run

    cands = {}
    for name in VARIANTS:
        cands[f"{name}_forward"] = forward(name)
        cands[f"{name}_step"] = step(name)
    samples = time_in_rounds(cands, rounds, iters, warmup, dev, batch)
    row = {"tokens": tokens, "hidden": hidden, "ffn": ffn, "world_size": W,
           "dtype": str(dtype), "device": torch.cuda.get_device_name(dev)
           if dev.type == "cuda" else "cpu"}
    for name, times in samples.items():
        row[name] = agreed_median(times)
    for kind in ("forward", "step"):
        row[f"speedup_{kind}"] = row[f"fallback_{kind}"] / row[f"overlap_{kind}"]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ditron bench tp-mlp",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=positive_int, default=2,
                   help="ranks to launch, at least 2 (default %(default)s)")
    p.add_argument("--shape", default="8192,4096,11008", type=int_list(("tokens", "hidden", "ffn")),
                   help="tokens,hidden,ffn (global; default %(default)s)")
    add_timing_options(p, 3, 20, rounds=4)
    p.add_argument("--batch", type=positive_int, default=4,
                   help="steps per timed sample (default %(default)s)")
    p.add_argument("--smoke", action="store_true",
                   help="CPU backend, tiny shapes, timed with --warmup 1 --iters 2 --batch 1 "
                        "--rounds 1 unless given")
    p.add_argument("--out", type=output_file, help="write the result row as JSON here")
    args = p.parse_args(argv)
    backend = "cpu" if args.smoke else "cuda"
    if backend == "cuda" and not torch.cuda.is_available():  # before any rank starts
        p.error("no CUDA device is visible: it times GPUs (--smoke runs tiny shapes on the "
                "CPU backend)")
    if args.smoke:
        smoke_defaults(p, argv, args, {"shape": [16 * args.world_size, 32, 16 * args.world_size]},
                       {"warmup": 1, "iters": 2, "batch": 1, "rounds": 1})
    if args.world_size == 1:  # every op falls back: the speed-ups would compare it with itself
        p.error("--world-size 1: one rank has nothing to overlap (both variants run the "
                "fallback); give --world-size 2 or more")
    tokens, hidden, ffn = args.shape
    if tokens % args.world_size or ffn % args.world_size:
        p.error(f"tokens and ffn must divide by the world size {args.world_size}")
    row = ditron.launch(_measure, args.world_size, tokens, hidden, ffn, args.warmup,
                        args.iters, args.batch, args.rounds, backend=backend)[0]
    print(f"tokens {tokens}, hidden {hidden}, ffn {ffn}, W = {args.world_size}, bf16, "
          f"us per call (slower rank's median)")
    for kind in ("forward", "step"):
        print(f"  {kind:8s} fallback {row[f'fallback_{kind}']:10.1f}   overlap "
              f"{row[f'overlap_{kind}']:10.1f}   speed-up {row[f'speedup_{kind}']:.3f}x")
    if args.out:
        meta = provenance("tp-mlp", argv, backend, **vars(args))
        write_json(args.out, dict(row, meta=meta))
    return 0

