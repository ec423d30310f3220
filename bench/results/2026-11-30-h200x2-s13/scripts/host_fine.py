"""bench/host_breakdown.py with finer wrapped functions (torch events and streams, the
signal helpers), for the copy-engine GEMM-RS paths at a small shape (the GPU keeps up).

    python bench/results/2026-11-30-h200x2-s13/scripts/host_fine.py \
        [--calls 100] [--shape 1024,512,512]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
import host_breakdown as hb  # noqa: E402

hb.WRAPPED += [
    ("torch.cuda", "Event.record"), ("torch.cuda", "Stream.wait_event"),
    ("torch.cuda", "Stream.wait_stream"), ("torch.cuda", "current_stream"),
    ("ditron.engines.sync", "use_stream_memops"), ("ditron.engines.sync", "slot_address"),
    ("ditron.engines.copy_engine", "check_transfer"),
    ("ditron.engines.streams", "mark_current"), ("ditron.engines.streams", "start_after"),
    ("ditron.ops.tp_gemm", "_validate"), ("ditron.ops.tp_gemm", "_choose"),
    ("ditron.ops.tp_gemm", "graph_mode"), ("ditron.ops.tp_gemm", "_open_segments"),
    ("ditron.ops.exchange", "refuse_capture"), ("ditron.ops.exchange", "_inbox"),
    ("ditron.ops.exchange", "signal_pad"),
    ("ditron.runtime.stream_memops", "write_value"),
    ("ditron.runtime.stream_memops", "wait_value"), ("ditron.runtime.stream_memops", "memcpy"),
    ("ditron.engines.copy_engine", "CopyEngine.issue"),
    ("ditron.engines.copy_engine", "CopyEngine._issue_cuda"),
]


def _ops(m: int, n: int, k: int):
    from host_profile import _tp_impls

    wanted = ("gemm_rs/copy_engine", "gemm_rs/copy_engine_pull", "ag_gemm/overlap")
    return [impl for impl in _tp_impls(m, n, k) if impl[0] in wanted]


hb._ops = _ops

if __name__ == "__main__":
    sys.argv += [] if "--shape" in sys.argv else ["--shape", "1024,512,512"]
    sys.exit(hb.main())
