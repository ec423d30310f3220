"""Benchmarks run by ``ditron bench NAME`` (one module per NAME)."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any


def strict(value: Any) -> Any:
    """``value`` with every float that is not finite (a NaN error, an infinite time) as the
    string Python reads back with ``float()``: ``"nan"``, ``"inf"``, ``"-inf"``. Python's
    ``json`` would write ``NaN`` / ``Infinity``, which no other JSON reader accepts."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def worst(value: float) -> float:
    """The largest of every rank's ``value`` (an error), NaN where any rank's is NaN
    (collective: every rank gets the same number). A rank's NaN is its wrong result: a
    ``MAX`` across ranks as ``tune.tuner.agreed_median`` takes keeps the finite values of
    the others (gloo's did), so a rank's NaN went unreported."""
    import torch
    import torch.distributed as dist

    from ..runtime.world import current

    rt = current()
    nan = math.isnan(value)
    row = torch.tensor([-math.inf if nan else value, float(nan)], dtype=torch.float64)
    if rt.world.world_size > 1:
        dist.all_reduce(row, op=dist.ReduceOp.MAX, group=rt.host_group)
    return math.nan if row[1].item() else float(row[0].item())


def inside_world(parser: argparse.ArgumentParser, world_size: int | None,
                 backend: str | None) -> tuple[int, str] | None:
    """Inside a world (a benchmark's ``main`` called in ranks already started: it times
    them rather than launch its own), that world's ``(world_size, backend)``, refusing (a
    usage error) ``--world-size`` / ``--backend`` given otherwise, which were ignored, the
    shapes made for the one and timed on the other; ``None`` outside a world."""
    from ..runtime.world import current, is_initialized

    if not is_initialized():
        return None
    world = current().world
    for flag, given, actual in (("--world-size", world_size, world.world_size),
                                ("--backend", backend, world.backend)):
        if given is not None and given != actual:
            parser.error(f"{flag} {given}: called inside a world of {world.world_size} ranks "
                         f"on the {world.backend} backend, which it times; leave it out")
    return world.world_size, world.backend


def provenance(bench: str, argv: list[str] | None, backend: str, **settings: Any) -> dict:
    """What a benchmark's JSON keeps beside its numbers so that they can be re-run and
    compared: the command (``ditron bench <bench>`` and its arguments), when (UTC), the
    device, the versions of torch, triton and ditron, and ``settings`` (warm-up and
    timed calls, world size, dtype, ...)."""
    import datetime
    import shlex
    import sys

    import torch
    import triton

    from .. import __version__

    args = sys.argv[1:] if argv is None else list(argv)
    if argv is None and args[:2] == ["bench", bench]:  # run as ``python -m ditron bench``
        args = args[2:]
    device = (torch.cuda.get_device_name() if backend == "cuda" and torch.cuda.is_available()
              else "cpu")
    return dict(command=shlex.join(["python", "-m", "ditron", "bench", bench, *args]),
                date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                device=device, backend=backend, torch=torch.__version__,
                triton=triton.__version__, ditron=__version__, **settings)


def write_json(path: str, value: Any) -> None:
    """Write a benchmark's results to ``path`` as strict JSON (:func:`strict`)."""
    with open(path, "w") as f:
        json.dump(strict(value), f, indent=1, allow_nan=False)
