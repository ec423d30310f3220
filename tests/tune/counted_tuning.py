"""A tuning run under given settings that reports what each rank saw (run in ranks)."""

from __future__ import annotations

import os

import torch


def tune_counting(cache_dir: str, settings: dict[str, str]) -> tuple[str, int]:
    """``tune`` of a tiny fp32 ``gemm_rs`` with ``DITRON_CACHE_DIR=cache_dir`` and the
    environment ``settings``: the error (type, first line) or the method chosen, and how
    many timings ran."""
    from ditron.tune import tuner

    os.environ["DITRON_CACHE_DIR"] = cache_dir
    os.environ.update(settings)
    timed = []
    time_calls = tuner.time_calls
    tuner.time_calls = lambda *a, **k: timed.append(1) or time_calls(*a, **k)
    try:
        decision = tuner.tune("gemm_rs", 8, 8, 8, torch.float32, warmup=0, iters=1,
                              progress=False)
    except Exception as exc:  # noqa: BLE001 - the test compares what each rank saw
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}", len(timed)
    return decision.method, len(timed)
