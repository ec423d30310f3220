"""What ``tuner.split_rows_for`` picks on this GPU for the GEMM-RS shapes (W = 2 segments of
one rank's M = 8192, world size 1 runtime, so the timing is one GPU's) - session 25 lab."""
from __future__ import annotations

import torch

import ditron
from ditron.tune import tuner


def case() -> list[str]:
    out = []
    for N, K in ((4096, 5504), (4096, 7168), (3584, 7168), (4608, 18432), (8192, 14336)):
        a = torch.randn(8192, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
        seg = 4096
        t = tuner._row_times(a, b, {1536, 1664, 1792, 1920, 2048, 2176, 2304, 2432, 2560}, 4)
        picks = tuner.split_rows_for(a, b, seg, 4)
        out.append(f"N={N} K={K}: picks {picks}; t(rows) us: "
                   + " ".join(f"{m}:{v:.1f}" for m, v in t.items())
                   + f"; halves {2 * t[2048]:.1f}, "
                   + ", ".join(f"({seg - r},{r}) {t[seg - r] + t[r]:.1f}"
                               for r in (1536, 1664, 1792, 1920)))
    return out


if __name__ == "__main__":
    for line in ditron.launch(case, 1, backend="cuda")[0]:
        print(line, flush=True)
