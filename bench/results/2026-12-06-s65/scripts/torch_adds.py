"""Which dtypes torch's add_ supports on a device (engines/base.py's ADDED list):
python torch_adds.py cuda"""
import sys

import torch

dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
for d in sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str):
    try:
        a = torch.ones(4, dtype=d, device=dev) if d.is_complex else torch.ones(4, device=dev).to(d)
        a.add_(a.clone())
        r = "ok"
    except Exception as e:  # noqa: BLE001
        r = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
    print(f"{dev} {str(d):28s} {r}")
