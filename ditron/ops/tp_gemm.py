"""Overlapped tensor-parallel GEMMs: ``ag_gemm``, ``gemm_rs``, ``gemm_ar``.

Each op = the persistent GEMM (``kernels/gemm.py``) + a chunk plan (``plan/``) + the
distributed swizzle (``kernels/swizzle.py``) + a decision (tuned or cost model) with a plain
fallback (``torch.matmul`` + ``torch.distributed`` on the default group).

Heap buffers are cached workspaces (``ops/workspaces.py``: per shape, freed and rebuilt
when the heap runs full), host metadata (tile orders, plans, decisions) per shape and tile
config in a bounded cache (``runtime/bounded_cache.py``: least recently used signatures
evicted, the same on every rank; what a CUDA graph reads pinned); every
buffer peers touch is **double-buffered by call parity** and every signal is *set* to the
call's epoch (``docs/developing.md``), so no barrier and no reset is needed between calls:
a rank writes buffer ``e % 2`` in call ``e`` only after its call ``e - 1`` waited on every
peer's call-``e - 1`` signals, i.e. after every peer has finished call ``e - 2``, the last
one that used that buffer. (This needs every peer to signal this rank in every call, which
holds for non-empty shards; empty shapes take the fallback.)

CUDA graphs: while a graph is being captured (and eagerly inside ``ops.graph_safe()``, the
warm-up before a capture; ``graphs.py``), the ops take *graph-safe* variants with the same
protocol but the epoch counted on the device (``SignalPad.device_epoch``, bumped by a
one-program kernel at the start of each call; the GEMM and the signal kernels read it), so a
replay serves a new call: AG-GEMM pushes with the copy engine into a single buffer per peer,
each push waiting (on the engine's stream) until that peer acknowledged reading the previous
call's rows; GEMM-RS / GEMM-AR run the colocated epilogue on double buffers whose half the
kernel picks from the epoch's parity; GEMM-RS by the copy engine (``rs_copy_engine.py``)
uses the exchange's graph-safe inbox (``exchange.graph_pad``). They use their own pads and
buffers, allocated by the warm-up.

Shapes are checked across ranks (``runtime.agreement``, through the host gloo group) the
first time each shape signature is seen on a rank; when one rank later repeats a checked
call while another makes a new one, the new one waits in the host check for a peer that
never comes (no ``DITRON_WAIT_TIMEOUT`` there: only ``DITRON_LAUNCH_TIMEOUT`` or the host
group's own timeout end it), and the repeating rank hangs in its waits or collectives,
unless ``DITRON_CHECK_CALLS=1`` checks every call.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from ..engines import tma
from ..engines.base import Signal
from ..engines.sync import bump, notify_one, notify_peers, use_stream_memops, wait_one
from ..kernels import swizzle
from ..kernels.gemm import (
    EPI_ALL_REDUCE,
    EPI_REDUCE_SCATTER,
    EPI_STORE,
    TRACE_FIELDS,
    GemmConfig,
    GemmHooks,
    default_config,
    launch_gemm,
    own_rows_ok,
    scalar_loads,
    slot_waits,
)
from ..plan import deps as plan_deps
from ..plan import ir as plan_ir
from ..plan import lowering, templates
from ..runtime import bounded_cache
from ..runtime.agreement import agree, checks_every_call, rank0_decides, refused_together
from ..runtime.diagnostics import check_waits
from ..runtime.grid_math import cdiv
from ..runtime.integers import as_int, check_int
from ..runtime.signals import signal_pad
from ..runtime.symmetric import context
from ..runtime.torch_dist import reduce_scatter_single
from ..runtime.world import current
from ..tune.decisions import b_layout, conditions, lookup
from . import rs_copy_engine
from .exchange import engine_instance
from .graphs import capturing, graph_mode, not_warmed, require_warm
from .modes import public_op
from .workspaces import alloc_buffers, allocate, cached

METHODS = ("auto", "overlap", "fallback")
AG_ENGINES = ("copy_engine", "colocated", "sm", "tma", "copy_engine_matmul")
#: AG-GEMM engines that push on SMs beside the GEMM (their epochs live on the host)
AG_SM_ENGINES = ("sm", "tma")
#: AG-GEMM engines with a graph-safe variant (the others fall back, or raise when forced)
AG_GRAPH_ENGINES = ("copy_engine", "copy_engine_matmul")
#: SMs the "sm" / "tma" AG-GEMM engines take for their pushes when the tile config does not say
#: (``GemmConfig.programs``: the GEMM's programs; the engine gets the device's other SMs)
COMM_SMS = 16
RS_ENGINES = ("colocated", "copy_engine", "copy_engine_pull")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
T = TypeVar("T")


# -- validation ------------------------------------------------------------------------------
def _validate(op: str, a: torch.Tensor, b: torch.Tensor, method: str,
              config: GemmConfig | None, options: Callable[[], T] | None = None) -> T | None:
    """Check the operands, ``method`` and ``config`` of ``op``, then ``options()`` (the op's
    other arguments; returns its result), and the ranks' agreement on the call. A rank that
    refuses its arguments tells its peers in that agreement's gather
    (``runtime.agreement.refused_together``), so they raise too instead of waiting."""
    # a call like one already validated (every check below depends only on this) returns
    # at once: the checks cost ~15 us of host time per call on GPU hosts
    seen = (op, method, a.shape, b.shape, a.dtype, b.dtype, a.device, b.device) \
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else None
    shapes = bounded_cache.named("tp_gemm")
    with refused_together(f"ditron.ops.{op}"):
        if config is not None and not isinstance(config, GemmConfig):
            # it keys caches and the ranks' agreement on the tiles: a dict used to raise an
            # unhashable TypeError on its rank alone, leaving the peers waiting
            raise TypeError(f"ditron.ops.{op}: config must be a ditron.kernels.gemm."
                            f"GemmConfig or None, got {type(config).__name__}")
        if shapes.get(("valid", seen)) and not checks_every_call():
            return None if options is None else options()
        _check_operands(op, a, b, method)
        got = None if options is None else options()
    try:
        agree(f"ditron.ops.{op}", a_shape=tuple(a.shape), b_shape=tuple(b.shape),
              dtype=a.dtype, method=method)
    except ValueError as exc:  # raised on every rank alike: the same hint on each
        raise _shape_hint(op, exc) from None
    shapes.put(("valid", seen), True)
    return got


#: what each op needs of the ranks' shapes, told where they differ
_SHAPES_WANTED = {
    "ag_gemm": "a [m, K] and b [K, N] with the same m, K and N on every rank (it gathers "
               "equal shards of m rows)",
    "gemm_rs": "a [M, k] and b [k, N] with the same M, k and N on every rank (k = K / W: "
               "uneven K shards, such as an FFN dimension that W does not divide, are not "
               "supported; pad them to equal k)",
    "gemm_ar": "a [M, k] and b [k, N] with the same M, k and N on every rank (k = K / W: "
               "uneven K shards, such as an FFN dimension that W does not divide, are not "
               "supported; pad them to equal k)",
}


def _shape_hint(op: str, exc: ValueError) -> ValueError:
    """``exc`` (the ranks' disagreement on ``op``'s call), its message completed with the
    shapes ``op`` takes where the ranks' shapes differ. The same exception object, so it
    stays marked as raised on every rank (``runtime.agreement``)."""
    msg = str(exc)
    first = msg.split("\n", 1)[0]
    if "ranks disagree" in first and ("a_shape" in first or "b_shape" in first):
        exc.args = (f"{msg}\n  ditron.ops.{op} takes {_SHAPES_WANTED[op]}",)
    return exc


def _check_operands(op: str, a: torch.Tensor, b: torch.Tensor, method: str) -> None:
    """:func:`_validate`'s checks of this rank's operands and ``method``."""
    rt = current()
    if method not in METHODS:
        raise ValueError(f"ditron.ops.{op}: method must be one of {METHODS}, got {method!r}")
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"ditron.ops.{op}: {name} must be a torch.Tensor, got "
                            f"{type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"ditron.ops.{op}: {name} must be 2-D, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise ValueError(f"ditron.ops.{op}: {name} has dtype {t.dtype}; use float16, "
                             f"bfloat16 or float32")
        if t.device != rt.world.device:
            raise ValueError(f"ditron.ops.{op}: {name} is on {t.device}, this rank computes on "
                             f"{rt.world.device}")
    if a.dtype != b.dtype:
        raise ValueError(f"ditron.ops.{op}: dtype mismatch: a is {a.dtype}, b is {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"ditron.ops.{op}: a {tuple(a.shape)} and b {tuple(b.shape)} do not "
                         f"multiply (a.shape[1] != b.shape[0])")
    W = rt.world.world_size
    if op == "gemm_rs" and a.shape[0] % W != 0:
        raise ValueError(f"ditron.ops.{op}: a {tuple(a.shape)}: M = {a.shape[0]} rows is not "
                         f"divisible by the world size {W} (reduce_scatter splits rows "
                         f"evenly: a must be [M, k] with M a multiple of {W})")


# -- CUDA graphs -----------------------------------------------------------------------------
def _no_graph_variant(op: str, method: str, why: str) -> bool:
    """``method="overlap"`` with no graph-safe overlapped variant raises; ``"auto"`` falls
    back (returns ``False``: not overlapped)."""
    if method == "overlap":
        raise RuntimeError(f"ditron.ops.{op}(method='overlap') cannot be captured in a CUDA "
                           f"graph: {why} (method='auto' takes the graph-safe fallback)")
    return False


# -- decisions -------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Choice:
    overlap: bool
    config: GemmConfig
    engine: str | None = None  # a tuned transfer engine, if any
    chunk_rows: int | tuple[int, ...] | None = None  # a tuned chunking, if any
    early_rows: int = 0  # a tuned early_rows (GEMM-RS by the copy engine)
    graph: Choice | None = None  # the tuned choice for calls captured in CUDA graphs
    tuned: bool = False  # from the tuner's cache (its config measured, not the default)


def _choose(op: str, method: str, M: int, a: torch.Tensor, b: torch.Tensor,
            config: GemmConfig | None) -> Choice:
    """Overlap or fall back, and the GEMM's config, for ``op`` over ``M`` rows of ``a``
    (``[rows, K]``, as the GEMM will read it) times ``b``."""
    rt = current()
    W = rt.world.world_size
    N, K, dtype = b.shape[1], b.shape[0], a.dtype
    epilogue = {"gemm_rs": EPI_REDUCE_SCATTER, "gemm_ar": EPI_ALL_REDUCE}.get(op, EPI_STORE)
    scalar = scalar_loads(a, b, rt.world.device)
    cfg = config or default_config(rt.world.device, dtype, (a, b), epilogue, scalar=scalar)
    if method == "fallback" or W == 1 or M == 0 or N == 0:
        return Choice(False, cfg)
    # The tiles number the signals the peers' epilogues write, and they and b's layout pick
    # "auto"'s cache entry (a miss on one rank only would leave it alone in the broadcast
    # below, and a hit would then serve a decision made for rank 0's layout): operands laid
    # out differently on different ranks must not split them.
    layout = b_layout(b) if method == "auto" else None
    with refused_together(f"ditron.ops.{op} tiles"):  # a bad DITRON_GEMM_TMA: told to peers
        # what else keys the decision and may change between calls (debug mode, the
        # GEMMs' load path): the memo below follows it, as rank 0's cache key does
        when = conditions() if layout is not None else ()
    agree(f"ditron.ops.{op} tiles", config=cfg, unvectorized_loads=scalar, b_layout=layout)
    if layout is None:  # method="overlap"
        return Choice(True, cfg)
    # Ranks must take the same path (their caches on disk may differ): rank 0 decides, once
    # per signature and conditions in this world (tune() in this process drops the memo)
    choice = bounded_cache.named("tp_gemm").get_or_make(
        ("choice", op, M, N, K, dtype, config, cfg, scalar, layout, when),
        lambda: rank0_decides(f"ditron.ops.{op} method='auto'",
                              lambda: _auto_choice(op, M, N, K, dtype, config, cfg, scalar,
                                                   layout)))
    if choice.graph is not None and graph_mode():
        return choice.graph
    return choice


def _auto_choice(op: str, M: int, N: int, K: int, dtype: torch.dtype,
                 config: GemmConfig | None, cfg: GemmConfig, scalar: bool = False,
                 layout: str = "t") -> Choice:
    """The tuned decision for ``b`` laid out as ``layout`` (``tune.decisions.b_layout``) and
    operands whose loads vectorize or not (``scalar``: they cannot,
    ``kernels.gemm.scalar_loads``) if one is cached for this device, else the cost model's,
    charged the slowdown of such loads. A decision timed on aligned operands does not serve
    a misaligned view of the same shape (``a[:, 1:]``, an odd row stride): its overlap was
    measured at vector-load speed. The ranks agreed on ``scalar`` (``_choose``)."""
    rt = current()
    W = rt.world.world_size
    tuned = lookup(op, M, N, K, dtype, W, layout, scalar)
    if tuned is not None:
        def choice(d) -> Choice:
            return Choice(d.method == "overlap", config or d.gemm_config(), d.engine,
                          d.chunk_rows, d.early_rows, tuned=True)

        graph = choice(tuned.graph) if tuned.graph is not None else None
        return dataclasses.replace(choice(tuned), graph=graph)
    from ..tune.cost_model import gemm_slowdown, overlap_pays

    name = torch.cuda.get_device_name(rt.world.device) if rt.world.device.type == "cuda" else ""
    slowdown = gemm_slowdown(dtype.itemsize, scalar)
    return Choice(overlap_pays(op, M, N, K, W, dtype.itemsize, rt.world.backend, name,
                               gemm_slowdown=slowdown), cfg)


def _after_launch() -> None:
    rt = current()
    if (rt.wait_timeout > 0 or rt.world.backend == "cpu") and not capturing():
        check_waits()


def _traced_launch(op: str, a, b, c, M: int, *, order, seg_rows: int, cfg: GemmConfig,
                   hooks: GemmHooks, n_blocks: int, ctx=None) -> None:
    """``launch_gemm``, recording the overlap trace when ``ditron.trace`` is on."""
    from .. import trace

    if not trace.enabled() or capturing():
        launch_gemm(a, b, c, M, order=order, seg_rows=seg_rows, cfg=cfg, hooks=hooks, ctx=ctx)
        return
    hooks.trace = torch.zeros(1 + TRACE_FIELDS * order.numel(), dtype=torch.int64,
                              device=c.device)
    t0 = trace.host_clock()
    launch_gemm(a, b, c, M, order=order, seg_rows=seg_rows, cfg=cfg, hooks=hooks, ctx=ctx)
    current().backend.synchronize(c.device)
    trace.record(op, hooks.trace.cpu(), n_blocks, t0, trace.host_clock())


# -- AG-GEMM ---------------------------------------------------------------------------------
@public_op
def ag_gemm(a: torch.Tensor, b: torch.Tensor, *, return_gathered: bool = False,
            method: str = "auto", config: GemmConfig | None = None,
            engine: str | None = None, chunk_rows: int | None = None):
    """``all_gather(a, dim=0) @ b``, overlapped.

    ``a``: ``[m, K]`` on every rank (same ``m``), ``b``: ``[K, N]`` with any strides (e.g.
    ``weight.t()``). Returns ``c`` (``[W*m, N]``), or ``(c, gathered_a)`` with
    ``return_gathered``. Torch equivalent::

        g = torch.empty(W * m, K); dist.all_gather_into_tensor(g, a); c = g @ b

    Overlapped path (colocated pull): each rank copies ``a`` into its symmetric shard buffer
    (after the network stage of a hierarchical plan when ranks span nodes) and publishes
    the chunk signals on the ranks of its node; the GEMM starts on its own rows, then visits
    the other shards in the plan's arrival order, waiting per tile for the chunks its rows
    read and loading them from the owner's heap.

    ``engine`` picks how remote rows arrive on a single node (the argument, else
    ``DITRON_AG_ENGINE``, else the tuned choice, else ``"copy_engine"``): ``"copy_engine"``
    pushes each shard into every peer's local gathered buffer with host-issued peer copies
    (DMA on GPU, no SMs taken from the GEMM), raising one chunk signal per shard, and the
    GEMM reads A locally; ``"sm"`` makes the same pushes with a load/store kernel on
    dedicated SMs beside the GEMM (``config.programs`` GEMM programs, by default all SMs but
    ``COMM_SMS``: the SMs given to communication are a tuning knob), ``"tma"`` (Hopper) the
    same with bulk tensor copies on those SMs;
    ``"copy_engine_matmul"`` makes the copy engine's pushes but computes with
    ``torch.matmul`` (cuBLAS) per chunk instead of the persistent GEMM: the own rows
    straight from ``a`` at once, each peer's chunk after a stream-ordered wait for its
    signal; ``"colocated"`` is the pull path above. Across nodes the colocated
    hierarchical path is used. ``chunk_rows`` (pushes only; default: the tuned value where
    the engine is the tuned one, else one chunk per shard) splits each shard into chunks of
    that many rows, each with its own signal, so tiles (or ``copy_engine_matmul``'s GEMMs)
    can start before a whole shard has landed; with ``"colocated"`` named (the argument or
    ``DITRON_AG_ENGINE``) it raises, on every path. Without an engine named it applies to
    the engine chosen (the tuned one, else ``"copy_engine"``) and has no effect where that
    is ``"colocated"`` (a tuned choice): never raising there, as where the call falls back.
    With ranks on several nodes ``engine`` and ``chunk_rows`` have no effect: the
    hierarchical plan moves whole shards over the network (one all-gather, not split: the
    GEMM on the same stream could not start on its first pieces anyway) and its GEMM pulls
    tiles in the node. Where the call falls back, ``engine``, ``chunk_rows`` and ``config``
    have no effect either.
    """
    def options() -> tuple[str | None, int | None]:
        forced = engine or os.environ.get("DITRON_AG_ENGINE") or None  # empty: unset
        if forced is not None and forced not in AG_ENGINES:
            raise ValueError(f"ditron.ops.ag_gemm: engine must be one of {AG_ENGINES}, got "
                             f"{forced!r}" + ("" if engine else " (from DITRON_AG_ENGINE)"))
        rows = (None if chunk_rows is None
                else check_int(chunk_rows, "ditron.ops.ag_gemm: chunk_rows", 1))
        _refuse_pull_chunks("ag_gemm", rows, forced)
        return forced, rows

    forced, chunk_rows = _validate("ag_gemm", a, b, method, config, options)
    rt = current()
    W = rt.world.world_size
    m, K = a.shape
    M = W * m
    if not (a.is_contiguous() and a.data_ptr() % 16 == 0):
        # every path's GEMM reads contiguous copies of the shards (heap buffers, or the
        # fallback's gathered tensor): alignment and tiles are judged on one, so a strided
        # or offset view of a takes the choices of the copy it is read from
        a = a.clone(memory_format=torch.contiguous_format)
    choice = _choose("ag_gemm", method, M, a, b, config)
    if choice.overlap and W % rt.world.local_world_size != 0:
        choice = dataclasses.replace(choice, overlap=False)
    graph = choice.overlap and graph_mode()
    # a tuned chunking goes with the tuned engine only
    rows = (chunk_rows if chunk_rows is not None
            else choice.chunk_rows if forced in (None, choice.engine) else None)
    if graph and rt.topo.num_nodes == 1 and forced in ("colocated", *AG_SM_ENGINES):
        # the engine asked for takes the call off its overlapped path here: agreed first,
        # as that path agrees on it, so ranks asking for different engines raise together
        # (one used to fall back or raise alone, its peers waiting for it)
        agree("ditron.ops.ag_gemm transfers", engine=forced, chunk_rows=rows, graph=graph)
    if graph and (rt.topo.num_nodes > 1 or forced in ("colocated", *AG_SM_ENGINES)):
        why = ("ranks span nodes" if rt.topo.num_nodes > 1
               else f"the {forced} engine keeps its epochs on the host; use one of "
                    f"{AG_GRAPH_ENGINES}")
        choice = dataclasses.replace(choice, overlap=_no_graph_variant("ag_gemm", method, why))
    if not choice.overlap:
        gathered = torch.empty((M, K), dtype=a.dtype, device=a.device)
        if W > 1:
            lowering.network_all_gather(gathered, a, rt.groups.device)
        else:
            gathered.copy_(a)
        c = torch.matmul(gathered, b)
        return (c, gathered) if return_gathered else c
    engine = forced or (choice.engine if choice.engine in AG_ENGINES else "copy_engine")
    if graph and engine not in AG_GRAPH_ENGINES:  # the graph-safe variants push by DMA
        engine = "copy_engine"
    if forced is None and engine == "colocated":
        # a tuned colocated choice moves tiles: a chunking given without an engine has no
        # effect there, as where the call falls back (it used to raise on this path only)
        chunk_rows = rows = None
    with refused_together("ditron.ops.ag_gemm transfers"):
        if engine == "tma":
            tma.check_supported(a.device)
        _refuse_pull_chunks("ag_gemm", chunk_rows, engine)
    # the engines push and signal differently, and the chunks number the signals
    agree("ditron.ops.ag_gemm transfers", engine=engine, chunk_rows=rows, graph=graph)
    if engine != "colocated" and rt.topo.num_nodes == 1:
        return _ag_pushed(a, b, choice.config, return_gathered, rows, graph, engine)
    return _ag_overlap(a, b, _pull_config(choice, config, a, b), return_gathered)


def _refuse_pull_chunks(op: str, chunk_rows, engine: str | None) -> None:
    """``chunk_rows`` given with the colocated engine, which moves tiles, not chunks: refused
    (it used to be ignored)."""
    if chunk_rows is not None and engine == "colocated":
        raise ValueError(f"ditron.ops.{op}: chunk_rows applies to the engines that move "
                         f"chunks, not engine='colocated' (it moves tiles)")


def _pull_config(choice: Choice, config: GemmConfig | None, a, b) -> GemmConfig:
    """The colocated pull's config: the default for A rows loaded from the peers' heaps
    (``default_config(..., a_remote=True)``) unless the config was given or tuned."""
    if config is not None or choice.tuned:
        return choice.config
    return default_config(current().world.device, a.dtype, (a, b), a_remote=True)


def _require_warm(op: str, pad_key: str, key: tuple) -> None:
    """While capturing, raise unless a warm-up made the pad ``pad_key`` and the metadata
    ``key`` (``graphs.require_warm``; the metadata lives in the op's bounded cache)."""
    require_warm(op, pad_key)
    if capturing() and key not in bounded_cache.named("tp_gemm"):
        raise not_warmed(op)


def _ag_key(a, b, cfg: GemmConfig, tag: str, chunk_rows: int | None) -> tuple:
    return ("ag_gemm", tag, *a.shape, b.shape[1], a.dtype, cfg, chunk_rows)


def _ag_workspace(a, b, cfg: GemmConfig, nodes: int, rows: int, tag: str,
                  chunk_rows: int | None = None, halves: int = 2) -> dict:
    """Per-shape AG-GEMM workspace: a symmetric A of ``rows`` rows in ``halves`` buffers (a
    cached workspace, ``ops/workspaces.py``), the plan (split into chunks of ``chunk_rows``
    rows when given), the gather-mode tile order, the chunk waits of each of its slots
    (derived from the plan) and this rank's own chunk ids."""
    rt = current()
    W, rank, L = rt.world.world_size, rt.world.rank, rt.world.local_world_size
    m, K = a.shape
    N = b.shape[1]
    key = _ag_key(a, b, cfg, tag, chunk_rows)
    shapes = bounded_cache.named("tp_gemm")
    ws = shapes.get(key)
    if ws is None:
        mode = "pull" if tag == "shards" else "push"
        plan = (templates.all_gather(m, W, mode=mode) if nodes == 1
                else templates.all_gather_2d(m, W, L))
        if chunk_rows is not None and 0 < chunk_rows < m:
            plan = plan_ir.split(plan, chunk_rows)
        own_ids = [c.id for c in plan.chunks if c.owner == rank]
        own = torch.tensor(own_ids, dtype=torch.int64, device="cpu")
        waits = plan_deps.consumer_waits(plan, plan_deps.TileMapping(W * m, cfg.block_m), rank)
        n_blocks = cdiv(N, cfg.block_n)
        order = swizzle.gather_order(waits.owner, n_blocks, rank, W,
                                     arrival=plan.arrival_order(rank), group_m=cfg.group_m)
        held = torch.tensor([q for q in range(W) if q % L == rank % L], dtype=torch.int32,
                            device="cpu")
        order = order.to(a.device)
        ws = dict(plan=plan, waits=slot_waits(order, waits.lo, waits.hi, n_blocks), order=order,
                  held=held.to(a.device), n_blocks=n_blocks, own=own.to(a.device),
                  own_ids=own_ids)
        # a CUDA graph captured with the graph-safe variant reads its order and waits
        shapes.put(key, ws, pinned=tag == "graph")
    # the heap buffer depends on the shape only (tile configs and chunkings share it)
    bufs = cached(("ag_gemm", tag, rows, K, a.dtype),
                  lambda: alloc_buffers([((halves, rows, K), a.dtype, f"ag_gemm:{tag}")]))
    return dict(ws, shards=bufs.tensors[0])


def _ag_pushed(a, b, cfg: GemmConfig, return_gathered: bool, chunk_rows: int | None,
               graph: bool = False, engine_name: str = "copy_engine"):
    """AG-GEMM on one node with pushes: the push all-gather plan, lowered to engine
    transfers, has every rank push its shard into rows ``[rank*m, (rank+1)*m)`` of each
    peer's gathered buffer ``e % 2`` and raise the peer's chunk signal ``rank`` to ``e``; the
    GEMM waits per tile for the chunks its rows read (waits derived from the same plan).
    ``engine_name``: ``"copy_engine"`` (DMA, no SMs), ``"sm"`` or ``"tma"`` (a load/store or
    bulk-copy kernel on a side stream, on the SMs the GEMM leaves free: ``cfg.programs`` GEMM
    programs, default all SMs but ``COMM_SMS``), all feeding the persistent GEMM, or
    ``"copy_engine_matmul"`` (DMA pushes, ``torch.matmul`` per chunk:
    :func:`_ag_by_chunks`). Pushes read the shard from ``a``; so does the persistent GEMM
    for my own rows where ``m`` is a whole number of tile rows (``GemmHooks.own_a``), else
    it reads a copy of them in the buffer. The sm engine's pushes read that copy always
    (made for them): its descriptor tables are keyed by address, and a new ``a`` each call
    made a new table, by a synchronous host-to-device copy, each call.

    Reuse: the engine's side stream first waits for this rank's stream, so the push of call
    ``e`` starts after this rank's GEMM of call ``e - 1``, which waited for every peer's
    call-``e - 1`` chunks, which those peers pushed only after their GEMM of call ``e - 2``
    (the last reader of buffer ``e % 2``) had finished.

    ``graph`` (the graph-safe variant): one buffer, the epoch ``E`` counted on the device,
    a pad per buffer shape that every chunking shares: slot ``q < W`` is rank ``q``'s
    acknowledgement (set to ``E`` after its GEMM of call ``E``), chunk ``c``'s signal is
    slot ``W + c``; a push to ``q`` waits for ``q``'s acknowledgement of call ``E - 1``.
    """
    rt = current()
    W, rank = rt.world.world_size, rt.world.rank
    m, K = a.shape
    N = b.shape[1]
    M = W * m
    tag = "graph" if graph else "pushed"
    pad_key = f"ag_gemm:graph:{M}x{K}:{a.dtype}"
    if graph:
        _require_warm("ag_gemm", pad_key, _ag_key(a, b, cfg, tag, chunk_rows))

    def workspace_and_pad():
        ws = _ag_workspace(a, b, cfg, 1, M, tag, chunk_rows, halves=1 if graph else 2)
        # graph: chunk ids never exceed the rows, so the pad never has to grow
        return ws, signal_pad(pad_key, W + M) if graph else signal_pad(
            "ag_gemm:pushed", ws["plan"].num_chunks)

    ws, pad = allocate(workspace_and_pad)  # no room for the pad: free the workspaces, again
    if graph:
        epoch = bump(pad)
        buf = ws["shards"][0]
        first = W  # chunk signals follow the acknowledgements
    else:
        epoch = pad.next_epoch()
        buf = ws["shards"][epoch % 2]
        first = 0
    a = a.contiguous()  # what the engines push (a copy only for a strided input)
    matmul = engine_name == "copy_engine_matmul"
    mine = slice(rank * m, (rank + 1) * m)
    # the persistent GEMM reads my own rows from a in place where whole row blocks allow it
    # (no tile then waits for an own chunk), else from a copy in the buffer
    in_place = not matmul and own_rows_ok(a, buf, cfg)
    # the sm engine keys its descriptor tables on the transfers' addresses, and makes a new
    # one by a synchronous host-to-device copy (the host waits for the stream): its pushes
    # read my rows from my copy in the buffer, whose address stays from call to call, not
    # from a (a fresh activation each step would make a table per call)
    staged = engine_name == "sm"
    if not (matmul or in_place) or staged:
        buf[mine].copy_(a)
    if not (matmul or in_place):
        if graph or (use_stream_memops() and len(ws["own_ids"]) <= 4):
            for chunk in ws["own_ids"]:  # my own chunks are ready once copied
                notify_one(pad, first + chunk, epoch, rank)
        else:
            pad.signals.index_fill_(0, ws["own"], epoch)
    if engine_name in AG_SM_ENGINES:
        sms = (torch.cuda.get_device_properties(a.device).multi_processor_count
               if a.device.type == "cuda" else 2)
        gemm_programs = cfg.programs or max(1, sms - COMM_SMS)
        cfg = dataclasses.replace(cfg, programs=gemm_programs)
        engine = engine_instance(engine_name, programs=max(1, sms - gemm_programs),
                                 concurrent=True)
    else:
        engine = engine_instance("copy_engine")
    shard, lo = (buf, 0) if staged else (a, rank * m)  # what the pushes read, its first row
    src = lambda chunk, _rank: shard[chunk.start - lo:chunk.stop - lo]  # noqa: E731
    dst = lambda chunk, _rank: buf[chunk.start:chunk.stop]  # noqa: E731
    transfers = lowering.engine_transfers(ws["plan"], rank, src, dst, pad, epoch)
    if graph:  # chunk signals shifted past the acks; wait for the peer's ack of call E - 1
        transfers = [dataclasses.replace(
            t, signal=dataclasses.replace(t.signal, index=first + t.signal.index),
            after=Signal(pad, t.dst_rank, epoch - 1)) for t in transfers]
    engine.issue(transfers)
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    hooks = GemmHooks(waits=ws["waits"], wait_sig=pad.signals[first:],
                      wait_target=0 if graph else epoch,
                      epoch_cell=epoch.cell if graph else None,
                      own_a=a if in_place else None, own_lo=rank * m)
    try:
        if matmul:
            _ag_by_chunks(ws["plan"], a, b, buf, c, pad, first, epoch)
        else:
            _traced_launch("ag_gemm", buf, b, c, M, order=ws["order"], seg_rows=M, cfg=cfg,
                           hooks=hooks, n_blocks=ws["n_blocks"])
        gathered = buf.clone() if return_gathered else None
        if return_gathered and (matmul or in_place) and not staged:
            gathered[mine].copy_(a)
    finally:
        if graph:  # done reading the peers' rows of this call (after the GEMM and the
            # clone; also when the launch failed, or the peers' next pushes would hang)
            notify_peers(pad, rank, epoch, rt.topo.node_ranks(), skip=rank)
    engine.drain()
    _after_launch()
    return (c, gathered) if return_gathered else c


def _ag_by_chunks(plan: plan_ir.Plan, a, b, buf, c, pad, first: int, epoch) -> None:
    """``c = gathered(a) @ b`` with ``torch.matmul`` per chunk, on the current stream: my own
    rows straight from ``a`` first, then each peer's chunks (in the plan's arrival order)
    from ``buf`` once their signal ``first + chunk id`` has reached ``epoch`` (a
    stream-ordered wait; the host never blocks)."""
    rank = current().world.rank
    m = a.shape[0]
    torch.matmul(a, b, out=c[rank * m:(rank + 1) * m])
    for owner in plan.arrival_order(rank):
        for chunk in plan.chunks_of(owner):
            if chunk.rows:
                wait_one(pad, first + chunk.id, epoch)
                torch.matmul(buf[chunk.start:chunk.stop], b, out=c[chunk.start:chunk.stop])


def _ag_overlap(a, b, cfg: GemmConfig, return_gathered: bool):
    rt = current()
    W, rank = rt.world.world_size, rt.world.rank
    L = rt.world.local_world_size
    nodes = W // L
    node = rank // L
    m, K = a.shape
    N = b.shape[1]
    M = W * m
    # no room for the pad: free the workspaces and build both again
    ws, pad = allocate(lambda: (_ag_workspace(a, b, cfg, nodes, nodes * m, "shards"),
                                signal_pad("ag_gemm", W)))
    epoch = pad.next_epoch()
    buf = ws["shards"][epoch % 2]
    if nodes > 1:
        lowering.network_all_gather(buf, a, lowering.local_index_group(rt))
    else:
        buf.copy_(a)
    ctx = context()
    lowering.publish(pad.signals, ws["held"], epoch, rt.topo.node_ranks(), ctx)
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    gathered = torch.empty((M, K), dtype=a.dtype, device=a.device) if return_gathered else None
    hooks = GemmHooks(a_remote=True, a_rows=m, a_local=L, node_base=node * L,
                      gathered=gathered, waits=ws["waits"], wait_sig=pad.signals,
                      wait_target=epoch)
    _traced_launch("ag_gemm", buf, b, c, M, order=ws["order"], seg_rows=M, cfg=cfg,
                   hooks=hooks, n_blocks=ws["n_blocks"], ctx=ctx)
    _after_launch()
    return (c, gathered) if return_gathered else c


# -- GEMM-RS / GEMM-AR ----------------------------------------------------------------------
@public_op
def gemm_rs(a: torch.Tensor, b: torch.Tensor, *, method: str = "auto",
            config: GemmConfig | None = None, engine: str | None = None,
            chunk_rows: int | tuple[int, ...] | None = None,
            early_rows: int | None = None) -> torch.Tensor:
    """``reduce_scatter(a @ b, dim=0)``, overlapped.

    ``a``: ``[M, k]``, ``b``: ``[k, N]`` (the rank's slice of the K dimension, any strides);
    ``M`` must be divisible by the world size ``W``. Returns ``[M / W, N]``: rank ``r`` gets
    the sum over ranks of rows ``[r*M/W, (r+1)*M/W)``. Torch equivalent::

        out = torch.empty(M // W, N); dist.reduce_scatter_tensor(out, a @ b)

    Overlapped paths, chosen by ``engine`` (the argument, else ``DITRON_RS_ENGINE``, else the
    tuned choice, else ``"colocated"``):

    * ``"colocated"`` (scatter swizzle, push from the GEMM): tiles destined to rank ``r+1``
      first, own rows last; a finished tile for rank ``d`` is stored into ``d``'s receive
      buffer and ``d``'s per-tile signal is set; the own tiles wait for the peers' partials
      and add them in the epilogue.
    * ``"copy_engine"`` (by segments): the partial product of rank ``d``'s rows is computed
      (``torch.matmul``) for ``d = r+1, r+2, ...`` in chunks of ``chunk_rows`` rows (default:
      the tuned value, else a whole segment), each pushed to ``d`` by the copy engine
      while the next one is computed; own rows last; then the partials are summed per
      chunk as each chunk lands. ``early_rows`` (default: the tuned value, else 0) of the
      own rows join the last peer's GEMM, where two uneven GEMMs run in fewer waves (one
      chunk per segment). A nonzero ``early_rows`` needs ``engine="copy_engine"`` named (the
      argument or ``DITRON_RS_ENGINE``): given without it, with another engine or with more
      chunks, it raises on every path; where the call falls back (``method="fallback"``,
      one rank, empty shapes, ranks on several nodes, or ``"auto"``'s choice) it has no
      effect, as ``engine``, ``chunk_rows`` and ``config`` have none.
    * ``"copy_engine_pull"``: the same partials, computed into this rank's own inbox and
      published; each rank pulls its rows' partials with the copy engine straight into
      the result, and its own rows' GEMM accumulates onto them (``addmm``) chunk by chunk
      (default ``rs_copy_engine.RS_PULL_CHUNKS`` chunks per segment): no separate sum.

    ``chunk_rows`` (the copy engines): an int cuts each segment of ``M / W`` rows into
    equal chunks of at most that many rows, up to as many chunks as the exchange has
    signals for (``rs_copy_engine.segment_bounds``: 63 eagerly, 8 graph-safe; past that the
    chunks are larger); a tuple gives the chunks' rows in order
    (positive, summing to ``M / W``), e.g. ``(2304, 1792)``: the tuner picks such a split
    for the pulled engine where two uneven GEMMs run in fewer waves than halves. Like a
    nonzero ``early_rows`` it needs its engine named (``engine=`` or ``DITRON_RS_ENGINE``,
    one of the copy engines): with ``"colocated"``, without an engine (the untuned default
    is ``"colocated"``), or as a tuple of more chunks than the exchange has signals for, it
    raises on every path, whatever ``method="auto"`` or the tuning cache choose; where
    the call falls back a valid one has no effect. A tuned chunking and ``early_rows``
    serve only the tuned engine, and only as a pair: a call naming another engine, a
    nonzero ``early_rows`` or ``chunk_rows`` takes the engine's defaults for the other knob.

    Partials travel in the input dtype; sums accumulate in fp32 (``"copy_engine_pull"``
    adds the peers' partials to the own rows' fp32 accumulator; the other engines sum in
    rank order).
    """
    rt = current()
    W = rt.world.world_size

    def options() -> tuple[str | None, int | tuple[int, ...] | None, int | None]:
        forced = engine or os.environ.get("DITRON_RS_ENGINE") or None  # empty: unset
        if forced is not None and forced not in RS_ENGINES:
            raise ValueError(f"ditron.ops.gemm_rs: engine must be one of {RS_ENGINES}, got "
                             f"{forced!r}" + ("" if engine else " (from DITRON_RS_ENGINE)"))
        seg = a.shape[0] // W
        early = None if early_rows is None else as_int(early_rows)
        if early_rows is not None and (early is None or not 0 <= early < max(seg, 1)):
            raise ValueError(f"ditron.ops.gemm_rs: early_rows must be an int in [0, M / W = "
                             f"{seg}), got {early_rows!r}")
        rows = _rs_chunk_rows(chunk_rows, seg)
        _refuse_pull_chunks("gemm_rs", rows, forced)
        # refused whatever path the call takes, as early_rows below: the engine left to
        # method="auto" (untuned: "colocated", which moves tiles) used to raise on the
        # overlapped path and let it pass where the call fell back
        if rows is not None and forced is None:
            raise ValueError("ditron.ops.gemm_rs: chunk_rows applies to engine='copy_engine' "
                             "or 'copy_engine_pull' only, and needs it named (engine=, or "
                             "DITRON_RS_ENGINE), not left to method='auto'")
        if isinstance(rows, tuple):  # more chunks than signals: refused on every path too
            rs_copy_engine.check_chunk_count(rows, graph_mode())
        # refused whatever path the call takes (they used to pass where it fell back, and
        # without an engine they raised or not as method="auto" chose)
        if early and forced != "copy_engine":
            given = (f"not {forced!r}" if forced else
                     "and needs it named (engine=, or DITRON_RS_ENGINE), not left to "
                     "method='auto'")
            raise ValueError(f"ditron.ops.gemm_rs: early_rows applies to engine='copy_engine' "
                             f"only, {given}")
        chunks = (1 if rows is None or not seg else len(rows) if isinstance(rows, tuple)
                  else -(-seg // rows))
        if early and chunks > 1:
            raise ValueError(f"ditron.ops.gemm_rs: early_rows={early} needs one chunk per "
                             f"segment, got chunk_rows={chunk_rows!r} ({chunks} chunks)")
        return forced, rows, early

    forced, chunk_rows, early_rows = _validate("gemm_rs", a, b, method, config, options)
    M = a.shape[0]
    N = b.shape[1]
    choice = _choose("gemm_rs", method, M, a, b, config)
    if choice.overlap and rt.topo.num_nodes > 1:
        choice = dataclasses.replace(choice, overlap=False)  # no inter-node push path yet
    graph = choice.overlap and graph_mode()
    if not choice.overlap:
        partial = torch.matmul(a, b)
        if W == 1:
            return partial
        out = torch.empty((M // W, N), dtype=a.dtype, device=a.device)
        reduce_scatter_single(out, partial.contiguous(), group=rt.groups.device)
        return out
    rs_engine = forced or choice.engine
    # the tuned chunking and early_rows go with the tuned engine, and with each other, only:
    # applied to another engine, or beside a nonzero early_rows given, a tuned chunking
    # raised on this path alone (early_rows needs one chunk per segment)
    tuned = forced is None or forced == choice.engine
    rows = (chunk_rows if chunk_rows is not None
            else choice.chunk_rows if tuned and not early_rows else None)
    with refused_together("ditron.ops.gemm_rs transfers"):
        if early_rows and rs_engine != "copy_engine":
            raise ValueError(f"ditron.ops.gemm_rs: early_rows applies to engine='copy_engine' "
                             f"only, not {rs_engine or 'colocated'!r}")
        _refuse_pull_chunks("gemm_rs", chunk_rows, rs_engine or "colocated")
    early = (early_rows if early_rows is not None
             else choice.early_rows if tuned and chunk_rows is None else 0)
    # the engines push or pull and signal differently, and the chunks number the signals
    agree("ditron.ops.gemm_rs transfers", engine=rs_engine, chunk_rows=rows,
          early_rows=early, graph=graph)
    if rs_engine == "copy_engine":
        return rs_copy_engine.pushed(a, b, rows, graph, early)
    if rs_engine == "copy_engine_pull":
        return rs_copy_engine.pulled(a, b, rows, graph)
    return _scatter_overlap("gemm_rs", a, b, choice.config, graph)


def _rs_chunk_rows(chunk_rows, seg: int) -> int | tuple[int, ...] | None:
    """``gemm_rs``'s ``chunk_rows`` checked: ``None``, a positive int, or the rows of each
    chunk of a segment of ``seg`` rows (a tuple; a list is accepted)."""
    if chunk_rows is None:
        return None
    rows = as_int(chunk_rows)
    if rows is not None and rows > 0:
        return rows
    if isinstance(chunk_rows, (tuple, list)):
        sizes = tuple(as_int(r) for r in chunk_rows)
        if sizes and all(r is not None and r > 0 for r in sizes) and sum(sizes) == seg:
            return sizes
        raise ValueError(f"ditron.ops.gemm_rs: chunk_rows as a sequence gives the rows of each "
                         f"chunk of a segment: positive ints summing to M / W = {seg}, got "
                         f"{chunk_rows!r}")
    raise ValueError(f"ditron.ops.gemm_rs: chunk_rows must be a positive int or a tuple of chunk "
                     f"sizes, got {chunk_rows!r}")


@public_op
def gemm_ar(a: torch.Tensor, b: torch.Tensor, *, method: str = "auto",
            config: GemmConfig | None = None) -> torch.Tensor:
    """``all_reduce(a @ b)``, overlapped. ``a``: ``[M, k]``, ``b``: ``[k, N]`` (any strides);
    returns ``[M, N]``, the sum over ranks, on every rank. Torch equivalent::

        c = a @ b; dist.all_reduce(c)

    Overlapped path (two-shot inside the GEMM): rows are split into ``W`` segments of
    ``ceil(M / W)`` rows (the last ones shorter or empty); the reduce-scatter of
    :func:`gemm_rs`, then each reduced own tile is pushed to every peer at once, and each
    program finally waits for and copies the peers' reduced tiles.
    """
    _validate("gemm_ar", a, b, method, config)
    rt = current()
    M = a.shape[0]
    choice = _choose("gemm_ar", method, M, a, b, config)
    if choice.overlap and rt.topo.num_nodes > 1:
        choice = dataclasses.replace(choice, overlap=False)
    if not choice.overlap:
        c = torch.matmul(a, b)
        if rt.world.world_size > 1:
            dist.all_reduce(c, group=rt.groups.device)
        return c
    return _scatter_overlap("gemm_ar", a, b, choice.config, graph_mode())


def _scatter_overlap(op: str, a, b, cfg: GemmConfig, graph: bool = False):
    """GEMM-RS / GEMM-AR with the colocated epilogue; ``graph``: the graph-safe variant (its
    own pad and buffers, the epoch counted on the device, the kernel picking the half)."""
    rt = current()
    W, rank = rt.world.world_size, rt.world.rank
    M, k = a.shape
    N = b.shape[1]
    seg = -(-M // W)
    key = (op, M, k, N, a.dtype, cfg)
    tag = f"{op}:graph" if graph else op
    shapes = bounded_cache.named("tp_gemm")
    if graph:
        _require_warm(op, tag, key)
        shapes.pin(key)  # a CUDA graph captured with this call reads its tile order
    ws = shapes.get(key)
    if ws is None:
        mapping = plan_deps.TileMapping(M, cfg.block_m, seg)
        n_blocks = cdiv(N, cfg.block_n)
        plan = (templates.reduce_scatter if op == "gemm_rs" else templates.all_reduce)(
            [max(0, min(seg, M - r * seg)) for r in range(W)], W)
        producers = plan_deps.consumer_waits(plan, mapping)
        live = [o if mapping.rows(mb)[1] > mapping.rows(mb)[0] else -1
                for mb, o in enumerate(producers.owner)]
        order = (swizzle.scatter_order if op == "gemm_rs" else swizzle.allreduce_order)(
            live, n_blocks, rank, W, group_m=cfg.group_m)
        tiles_per_seg = mapping.blocks_per_seg * n_blocks
        ws = dict(order=order.to(a.device), n_blocks=n_blocks,
                  tiles_per_seg=tiles_per_seg, total_tiles=mapping.m_blocks * n_blocks)
        shapes.put(key, ws, pinned=graph)
    # heap buffers depend on the shape only (tile configs share them)
    specs = [((2, W, seg, N), a.dtype, f"{tag}:recv")]
    if op == "gemm_ar":
        specs.append(((2, M, N), a.dtype, f"{tag}:bcast"))
    n_rs = W * ws["tiles_per_seg"]
    n_sig = n_rs + (ws["total_tiles"] if op == "gemm_ar" else 0)
    # no room left for the pad: free every workspace and fetch both again
    bufs, pad = allocate(lambda: (cached((tag, M, N, a.dtype),
                                         lambda: alloc_buffers(specs)).tensors,
                                  signal_pad(tag, n_sig)))
    ws = dict(ws, recv=bufs[0], bc=bufs[1] if op == "gemm_ar" else None)
    if graph:  # the kernel reads the epoch and takes half ``epoch % 2`` of recv / bc
        cell, epoch, parity = bump(pad).cell, 0, 0
    else:
        cell, epoch = None, pad.next_epoch()
        parity = epoch % 2
    if op == "gemm_rs":
        c = torch.empty((seg, N), dtype=a.dtype, device=a.device)
        hooks = GemmHooks(epilogue=EPI_REDUCE_SCATTER, recv=ws["recv"][parity],
                          rs_sig=pad.signals, epoch=epoch, epoch_cell=cell)
    else:
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        hooks = GemmHooks(epilogue=EPI_ALL_REDUCE, recv=ws["recv"][parity],
                          rs_sig=pad.signals, bc=ws["bc"][parity],
                          bc_sig=pad.signals[n_rs:], epoch=epoch, epoch_cell=cell)
    _traced_launch(op, a, b, c, M, order=ws["order"], seg_rows=seg, cfg=cfg, hooks=hooks,
                   n_blocks=ws["n_blocks"])
    _after_launch()
    return c
