"""Tuned decisions: what the tuner chose, keyed by op, shape, dtype, world size, device,
``b``'s layout, whether the operands' loads vectorize, whether a GPU world checks its calls
(debug mode), the GEMMs' load path where ``DITRON_GEMM_TMA`` departs from the device's
default, and the triton, torch and Ditron versions (Ditron's with a digest of its sources:
``cache.versions``).

The ops read decisions here (``method="auto"``); ``tuner.py`` measures and writes them.
"""

from __future__ import annotations

import dataclasses
import os

import torch

from ..kernels.descriptors import tma_wanted
from ..kernels.gemm import GemmConfig
from ..runtime import world
from . import cache

#: the transfer engines each op's decisions may name: those ``tuner.tune`` tries (ops not
#: listed run one overlapped path, named "colocated")
ENGINES = {"ag_gemm": ("copy_engine", "colocated", "sm", "copy_engine_matmul"),
           "gemm_rs": ("colocated", "copy_engine", "copy_engine_pull")}


@dataclasses.dataclass(frozen=True)
class Decision:
    """What the tuner chose for one (op, shape, dtype, world size, device): for eager calls,
    and in ``graph`` (when the tuner could time CUDA graphs) for calls captured in a graph,
    whose variants and costs differ (no host time; device-counted epochs)."""

    method: str  # "overlap" | "fallback"
    config: GemmConfig = GemmConfig()
    engine: str = "colocated"
    time_us: float = 0.0
    #: rows per chunk, or each chunk's rows of a GEMM-RS segment (None: the op's default)
    chunk_rows: int | tuple[int, ...] | None = None
    early_rows: int = 0  # own rows in the last peer's GEMM (GEMM-RS by the copy engine)
    graph: Decision | None = None  # the choice under CUDA graphs (its own ``graph``: None)

    def gemm_config(self) -> GemmConfig:
        return self.config

    @classmethod
    def from_json(cls, entry: object) -> Decision:
        """The decision a cache entry holds; ``ValueError`` (or ``KeyError`` / ``TypeError``)
        where the entry is not one this version wrote: a JSON object with a known method, a
        valid tile config, an engine name, a time (a finite number: a huge int raised
        ``OverflowError``), chunk rows ``null`` or positive ints, ``early_rows`` an int >= 0
        and ``graph`` ``null`` or such an object (its own ``graph`` ``null``); the config's
        ``flatten`` and ``tma_store`` are booleans (a string such as ``"false"`` would read
        as true)."""
        if not isinstance(entry, dict):
            raise ValueError(f"a decision is a JSON object, got {entry!r}")
        method, engine, time_us = entry["method"], entry["engine"], entry["time_us"]
        chunks, early = entry.get("chunk_rows"), entry.get("early_rows", 0)
        graph = entry.get("graph")
        if method not in ("overlap", "fallback") or not isinstance(engine, str):
            raise ValueError(f"unknown method or engine: {method!r}, {engine!r}")
        if not _is_int(early, 0) or isinstance(time_us, bool) or not isinstance(
                time_us, (int, float)) or not -1e300 < time_us < 1e300:  # NaN, inf, 10**400
            raise ValueError(f"early_rows {early!r} or time_us {time_us!r} is not a finite "
                             f"number")
        if isinstance(chunks, list):
            chunks = tuple(chunks)
            if not chunks or not all(_is_int(r, 1) for r in chunks):
                raise ValueError(f"chunk_rows {chunks!r} are not positive ints")
        elif chunks is not None and not _is_int(chunks, 1):
            raise ValueError(f"chunk_rows {chunks!r} is not a positive int")
        if graph is not None and (not isinstance(graph, dict) or graph.get("graph") is not None):
            raise ValueError(f"graph {graph!r} is not a decision of its own")
        flags = {k: entry["config"].get(k) for k in ("flatten", "tma_store")
                 if isinstance(entry["config"], dict)}
        if any(v is not None and not isinstance(v, bool) for v in flags.values()):
            raise ValueError(f"config flags {flags!r} are not booleans")
        return cls(method, GemmConfig(**entry["config"]), engine, float(time_us), chunks, early,
                   cls.from_json(graph) if graph is not None else None)

    def fits(self, op: str, M: int, world_size: int) -> bool:
        """Whether ``op`` over ``M`` rows (as :func:`key_for` takes them) on ``world_size``
        ranks can run this decision's knobs: the engine is one of ``op``'s
        (:data:`ENGINES`); a GEMM-RS's chunk sizes (a tuple) sum to its segment ``M / W``,
        and its ``early_rows`` is below it and comes with the pushed copy engine and one
        chunk per segment (the op refuses it with more: every ``auto`` call raised); the
        other ops take no tuple, and no ``early_rows``."""
        seg = M // max(world_size, 1)
        ok = self.engine in ENGINES.get(op, ("colocated",))
        if op == "gemm_rs":
            rows = self.chunk_rows
            chunks = (1 if rows is None or not seg else len(rows) if isinstance(rows, tuple)
                      else -(-seg // rows))
            ok = ok and (not isinstance(rows, tuple) or sum(rows) == seg) and (
                self.early_rows < max(seg, 1)) and (
                not self.early_rows or (self.engine == "copy_engine" and chunks == 1))
        else:
            ok = ok and not isinstance(self.chunk_rows, tuple) and self.early_rows == 0
        return ok and (self.graph is None or self.graph.fits(op, M, world_size))


def _is_int(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _device_name() -> str:
    """The device part of a cache key: the GPU's name (``cpu`` on the CPU backend), with
    the topology where it is not one GPU per rank on one node (decisions measured with
    ranks sharing a GPU, or on nodes joined by the network, do not carry over)."""
    from ..runtime.world import current

    rt = current()
    dev, local, W = rt.world.device, rt.world.local_world_size, rt.world.world_size
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    if dev.type == "cuda" and rt.backend.shares_devices(local):
        name += f", {local} ranks on {torch.cuda.device_count()} GPUs"
    if local < W:
        name += f", nodes of {local}"
    return name


#: how ``b`` (``[K, N]``) can be laid out: ``"t"``, a transposed ``[N, K]`` weight
#: (``weight.t()``, unit stride along K: what the tuner times by default); ``"n"``,
#: row-major (unit stride along N); ``"strided"``, neither
B_LAYOUTS = ("t", "n", "strided")
_VARIANTS = {"t": "", "n": "b row-major", "strided": "b strided"}


def b_layout(b: torch.Tensor) -> str:
    """``b``'s entry of :data:`B_LAYOUTS` (a dimension of size 1 has any stride: a ``[1, N]``
    or ``[K, 1]`` ``b`` reads as the transposed weight)."""
    K, N = b.shape
    if K == 1 or N == 1 or b.stride(0) == 1:
        return "t"
    return "n" if b.stride(1) == 1 else "strided"


def common_layout(*bs: torch.Tensor) -> str:
    """The :data:`B_LAYOUTS` entry several ``b`` operands share (an MLP's weights), else
    ``"strided"``: a mix is never tuned."""
    layouts = {b_layout(b) for b in bs}
    return layouts.pop() if len(layouts) == 1 else "strided"


def _checked_calls(rt: world.Runtime) -> bool:
    """Whether the op calls of the world ``rt`` run checked on a GPU: with a wait timeout
    (debug mode) every overlapped launch is followed by a device synchronize
    (``check_waits``), and with ``DITRON_CHECK_CALLS`` every call gathers its arguments
    over the host group, an overlapped one once more per step it agrees on; the fallback
    (cuBLAS + NCCL) pays no synchronize and one gather, so a decision timed so does not
    serve unchecked calls, nor one timed unchecked checked ones.
    The CPU backend checks every launch whatever the settings: its keys do not say so."""
    return rt.world.device.type != "cpu" and (rt.wait_timeout > 0 or rt.settings.check_calls)


def _load_path(device: torch.device) -> str:
    """``"TMA loads"`` or ``"pointer loads"`` where ``DITRON_GEMM_TMA`` makes the GEMMs on
    ``device`` load their operands otherwise than they do by default
    (``kernels.descriptors.tma_wanted``: through TMA on CUDA capability >= 9, through
    pointers elsewhere; ``1`` has the CPU backend's interpreter emulate TMA), else ``""``:
    the kernels timed differ, and so may the decision."""
    if not os.environ.get("DITRON_GEMM_TMA"):  # the default: the common case, cheaply
        return ""
    wanted = tma_wanted(device)
    if wanted == (device.type == "cuda" and tma_wanted(device, True)):
        return ""
    return "TMA loads" if wanted else "pointer loads"


def conditions() -> tuple[str, str]:
    """The parts of a decision's key (:func:`key_for`) that may change while a world runs:
    ``"checked calls"`` where a GPU world checks its calls (:func:`_checked_calls`;
    ``ditron.set_wait_timeout`` turns it on or off) and the GEMMs' load path where
    ``DITRON_GEMM_TMA`` departs from the device's default (:func:`_load_path`; read at
    every call), each ``""`` otherwise (both outside a world). ``method="auto"`` keys its
    in-process memo of a decision on them too, so that a change of either is decided
    again (on every rank where it is made on every rank, as every setting read at each
    call must be)."""
    if not world.is_initialized():  # no op runs there
        return ("", "")
    rt = world.current()
    return "checked calls" if _checked_calls(rt) else "", _load_path(rt.world.device)


def key_for(op: str, M: int, N: int, K: int, dtype: torch.dtype, world_size: int,
            layout: str = "t", scalar: bool = False) -> str:
    """The cache key of a decision; ``layout``: ``b``'s, one of :data:`B_LAYOUTS` (cuBLAS's
    and the tiles' speeds depend on it: decisions for one layout do not serve another);
    ``scalar``: the operands' loads cannot be vectorized (``kernels.gemm.scalar_loads``:
    the persistent GEMM runs up to 2.6x slower, so a decision measured on aligned operands
    does not serve them, nor one measured on such operands aligned ones). Aligned operands
    add nothing to the key; nor do unchecked calls, where a GPU world checks its calls
    (debug mode: :func:`_checked_calls`) the key says ``checked calls``; nor does the
    device's own load path, where ``DITRON_GEMM_TMA`` turns TMA off on a GPU that has it
    the key says ``pointer loads``, where it turns it on for the CPU backend ``TMA loads``
    (:func:`conditions`). The key ends with the versions of triton, torch and Ditron
    (``cache.versions``: with a digest of Ditron's sources)."""
    variant = ", ".join(v for v in (_VARIANTS[layout], "scalar loads" if scalar else "",
                                    *conditions()) if v)
    return cache.make_key(op, (M, N, K), str(dtype).replace("torch.", ""), world_size,
                          _device_name(), variant)


def lookup(op: str, M: int, N: int, K: int, dtype: torch.dtype,
           world_size: int, layout: str = "t", scalar: bool = False) -> Decision | None:
    """The cached decision for this op and shape (``b`` laid out as ``layout``, loads
    vectorized or not as ``scalar`` says: :func:`key_for`) on this device, if tuned;
    ``None`` where there is none, or the entry is not one this version can run (written by
    another version, or damaged): the op then decides without it, and ``tune`` replaces
    it."""
    entry = cache.get(key_for(op, M, N, K, dtype, world_size, layout, scalar))
    if entry is None:
        return None
    try:
        decision = Decision.from_json(entry)
    except (KeyError, TypeError, ValueError):  # written by another version: tune again
        return None
    return decision if decision.fits(op, M, world_size) else None
