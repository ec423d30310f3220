"""A tensor-parallel SwiGLU MLP as three tasks: the task level's worked example.

Per rank, with ``x`` ``[M, H]`` replicated, ``w_gate``/``w_up`` ``[H, F]`` this rank's column
shards and ``w_down`` ``[F, H]`` its row shard::

    up:     h[M, F]         = silu(x @ w_gate) * (x @ w_up)           (local tiles)
    down:   inbox_q[rank, c] = h[:, chunk c] @ w_down[chunk c, :],
                              pushed to every rank q                  (remote stores)
    reduce: out[M, H]       = sum_{r, c} inbox[r, c] (+ residual)      (local tiles)

which is ``out = all_reduce(silu(x @ Wg) * (x @ Wu) @ Wd) + residual``. Nothing in the tasks
says when a tile may run: a ``down`` tile waits for the ``up`` tiles of its rows and its
chunk ``c`` of ``h``'s columns, a ``reduce`` tile for the ``down`` tiles of its columns on
every rank, a
``down`` tile of a later layer that reuses ``inbox`` for the ``reduce`` tiles that read the
slot it overwrites, all derived from the regions.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import torch

from ..kernels import tiles
from ..kernels.descriptors import describe, tma_wanted, transposable
from ..kernels.offsets import check_int32_offsets
from ..runtime.agreement import agree, rank0_decides, refused_together
from ..runtime.integers import as_int, check_int
from ..runtime.symmetric import empty
from ..runtime.world import current
from ..tune import cache
from ..tune.decisions import B_LAYOUTS, common_layout, key_for
from .graph import CTX, TaskGraph, check_warps
from .region import region

#: Triton's default pipeline depth on sm_90, which the megakernel keeps unless told
STAGES = 3


@dataclasses.dataclass(frozen=True)
class MlpBlocks:
    """Tile sizes: ``block_m`` rows (>= 16), ``block_n`` output columns, ``block_k`` per
    step of the reduction, for the two GEMM tasks; the reduce task uses ``block_m`` x
    ``reduce_n``. ``split_k``: the down GEMM's reduction is cut in that many chunks, each a
    tile of its own (more tiles in flight, and each can start as soon as the ``up`` tiles
    of its chunk of ``h`` are done); the reduce task sums their partials. ``stages``: how
    deep the two GEMMs' K loops are software-pipelined (``None``: the megakernel's
    ``num_stages``, Triton's default unless given to ``compile``). ``warps``: the
    ``num_warps`` the tiles are sized for (``None``: the megakernel's default, 4); the
    megakernel runs with the most any of its tasks asks for (``TaskGraph.num_warps``).
    ``tma``: the two GEMM tasks load their operands through TMA descriptors
    (``kernels/descriptors.py``) instead of pointers where the operands allow it (16-byte
    aligned, one dim contiguous), on CUDA capability >= 9 (``True`` also on the CPU
    backend, whose interpreter emulates them); ``None``: as the persistent GEMM decides
    (``descriptors.tma_wanted``: on for capability >= 9 unless ``DITRON_GEMM_TMA=0``). The
    defaults were the fastest of those measured on an H200 for 16 tokens at hidden 1024
    and 4096 (``docs/perf.md``, session 31): wide tiles, whose weight rows are long
    contiguous runs, and few of them. ``down_n``: the ``down`` task's output columns per
    tile when not ``block_n`` (its tile holds one accumulator where ``up``'s holds two, so
    it can be twice as wide in the same registers, and read fewer bytes per FLOP)."""

    block_m: int = 16
    block_n: int = 128
    block_k: int = 128
    reduce_n: int = 256
    split_k: int = 4
    stages: int | None = None
    warps: int | None = None
    tma: bool | None = None
    down_n: int | None = None

    def smem_bytes(self, itemsize: int) -> int:
        """Shared memory of the largest tile's pipeline (``up``'s: the ``x``, gate and up
        blocks of every stage, or ``down``'s: its ``h`` and weight blocks; ``STAGES`` deep
        unless ``stages`` says)."""
        widest = max(2 * self.block_n, self.down_n or 0)
        return ((self.stages or STAGES) * (self.block_m * self.block_k
                                           + self.block_k * widest) * itemsize)

    def label(self) -> str:
        """``BMxBNxBKxRNxSPLIT``, then ``sSTAGES``, ``wWARPS``, ``t1`` or ``t0`` (``tma``)
        and ``dDOWN_N`` when set: ``128x128x64x256x4s4w8t1``, ``128x128x64x256x4s4w8d256``."""
        depth = f"s{self.stages}" if self.stages is not None else ""
        warps = f"w{self.warps}" if self.warps is not None else ""
        tma = "" if self.tma is None else f"t{int(self.tma)}"
        down = f"d{self.down_n}" if self.down_n is not None else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}x{self.reduce_n}x"
                f"{self.split_k}{depth}{warps}{tma}{down}")

    @classmethod
    def parse(cls, label: str) -> MlpBlocks:
        """The inverse of :meth:`label` (``xSPLIT`` may be left out for the default)."""
        match = re.fullmatch(
            r"(\d+)x(\d+)x(\d+)x(\d+)(?:x(\d+))?(?:s(\d+))?(?:w(\d+))?(?:t([01]))?(?:d(\d+))?",
            label.strip())
        if not match:
            raise ValueError(f"MlpBlocks: {label!r} is not "
                             f"BMxBNxBKxRN[xSPLIT][sSTAGES][wWARPS][t0|t1][dDOWN_N], "
                             f"e.g. 16x128x128x256x4 or 128x128x64x256x4s4w8t1")
        bm, bn, bk, rn, split, stages, warps, tma, down = match.groups()
        return cls(int(bm), int(bn), int(bk), int(rn), int(split) if split else cls.split_k,
                   int(stages) if stages else None, int(warps) if warps else None,
                   None if tma is None else tma == "1", int(down) if down else None)


def default_blocks(tokens: int, dtype: torch.dtype = torch.bfloat16,
                   smem: int | None = None) -> MlpBlocks:
    """The tiles ``add_tp_mlp`` uses for ``tokens`` rows of ``dtype`` when none are tuned:
    the fastest measured on an H200 in bf16 for the power of two covering the tokens, up to
    128 rows (``docs/perf.md``, sessions 31-35). More rows per tile read the weights fewer
    times; 128-row tiles need 8 warps to hold their two accumulators. ``smem``: the shared
    memory a program may use (``shared_memory``); ``block_k`` is halved until the tiles
    fit in it (fp32, or GPUs with less than an H200's)."""
    if tokens <= 16:
        blocks = MlpBlocks()
    elif tokens <= 32:
        blocks = MlpBlocks(32, 128, 128, 256, 4)
    elif tokens <= 64:
        blocks = MlpBlocks(64, 128, 64, 256, 4, stages=4)
    else:
        blocks = MlpBlocks(128, 128, 64, 256, 4, stages=4, warps=8)
    while smem is not None and blocks.block_k > 16 and blocks.smem_bytes(dtype.itemsize) > smem:
        blocks = dataclasses.replace(blocks, block_k=blocks.block_k // 2)
    return blocks


def shared_memory(device: torch.device) -> int | None:
    """Shared memory per program on ``device`` (opt-in), ``None`` off GPUs."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


def _gemm_operands(wanted: bool, a: torch.Tensor, a_box: tuple[int, int],
                   weights: Sequence[torch.Tensor], w_box: tuple[int, int]):
    """``(operands, transposed)`` for a GEMM task's TMA path: descriptors of the row-major
    activations ``a`` and of every weight, and per weight whether its descriptor is on its
    ``.t()``; ``None`` (the pointer path) when not ``wanted``, an operand breaks the TMA
    rules, or a 32-bit weight would be transposed (``descriptors.transposable``)."""
    if not wanted:
        return None
    a_desc = describe(a, a_box)
    w_descs = [describe(w, w_box) for w in weights]
    if a_desc is None or a_desc[1] or None in w_descs or any(
            d[1] and not transposable(w.dtype) for d, w in zip(w_descs, weights, strict=True)):
        return None
    return (a_desc[0], *(d for d, _ in w_descs)), tuple(t for _, t in w_descs)


#: the tuner's cache names its MLP decisions so (``task/tp_mlp_tuner.py``)
TUNED_OP = "tp_mlp"
#: the name of ``add_tp_mlp``'s checks and agreements
WHAT = "add_tp_mlp"


def tuned_blocks(tokens: int, hidden: int, ffn: int, dtype: torch.dtype,
                 world_size: int, layout: str = "t") -> MlpBlocks | None:
    """The :class:`MlpBlocks` that ``tune_mlp`` cached for this rank's shapes (``tokens``
    x ``hidden`` input, ``ffn`` this rank's columns of the MLP) and weights laid out as
    ``layout`` (``tune.decisions.B_LAYOUTS``: ``"t"``, ``nn.Linear``'s ``.t()``) on this
    device, if any: ``None`` also where the entry is not tiles ``add_tp_mlp`` takes
    (written by another version, or damaged), which ``tune_mlp`` then replaces. Reads this
    process's cache; ``add_tp_mlp`` uses rank 0's answer on every rank."""
    entry = cache.get(key_for(TUNED_OP, tokens, hidden, ffn, dtype, world_size, layout))
    try:
        return _check_blocks(MlpBlocks(**entry["blocks"])) if entry else None
    except (KeyError, TypeError, ValueError):  # not tiles we can run: tune again
        return None


def _check_blocks(blocks: MlpBlocks) -> MlpBlocks:
    """``blocks`` with plain-int fields, refusing tile sizes Triton would reject only when
    compiling: block extents are ``tl.arange`` lengths (powers of two), the GEMM tiles' are
    ``tl.dot`` operands (>= 16)."""
    ints = {}
    for name in ("block_m", "block_n", "block_k", "reduce_n", "down_n"):
        value = getattr(blocks, name)
        if value is None:
            continue
        least = 1 if name == "reduce_n" else 16
        v = as_int(value)
        if v is None or v < least or v & (v - 1):
            raise ValueError(f"add_tp_mlp: {name} must be a power of two >= {least}"
                             f"{' (tl.dot)' if least > 1 else ''}, got {value!r}")
        ints[name] = v
    ints["split_k"] = check_int(blocks.split_k, "add_tp_mlp: split_k", 1)
    if blocks.stages is not None:
        ints["stages"] = check_int(blocks.stages, "add_tp_mlp: stages", 1)
    ints["warps"] = check_warps(blocks.warps, "add_tp_mlp")
    if blocks.tma is not None and not isinstance(blocks.tma, bool):  # "0" would turn it on
        raise ValueError(f"add_tp_mlp: tma must be None, True or False, got {blocks.tma!r}")
    return dataclasses.replace(blocks, **ints)


def split_chunks(F: int, blocks: MlpBlocks) -> tuple[int, int]:
    """``(chunk, S)`` for ``F`` ffn columns on this rank: the ``down`` tiles' K range (whole
    ``block_k`` blocks) and how many of the ``split_k`` chunks have columns (one when ``F``
    is 0: its tiles then push zeros, and ``out = all_reduce(0) + residual``)."""
    chunk = max(1, -(-F // blocks.split_k // blocks.block_k)) * blocks.block_k
    return chunk, max(1, -(-F // chunk))


def inbox_shape(M: int, H: int, F: int, world_size: int,
                blocks: MlpBlocks) -> tuple[int, int]:
    """The shape of the symmetric ``inbox`` that :func:`add_tp_mlp` takes for an ``[M, H]``
    input, ``F`` ffn columns per rank and these tiles: ``world_size`` x ``S`` split-K slots
    (:func:`split_chunks`) x ``M`` rows, ``H`` columns. ``ValueError`` for tiles
    ``add_tp_mlp`` refuses."""
    return world_size * split_chunks(F, _check_blocks(blocks))[1] * M, H


#: the dtypes the MLP's tiles compute in (fp32 accumulation; others would be cast to fp32
#: on the CPU backend, or fail to compile on a GPU)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _check(x, w_gate, w_up, w_down, out, residual, h, inbox) -> None:
    """Refuse operands of other shapes, dtypes or devices than ``x`` and ``w_gate`` imply
    (``inbox``'s shape is checked once the tiles are known)."""
    if x.dim() != 2 or w_gate.dim() != 2:
        raise ValueError("add_tp_mlp: x and the weights must be 2-d")
    if x.dtype not in DTYPES:
        raise ValueError(f"add_tp_mlp: x is {x.dtype}; the tiles compute in "
                         f"{', '.join(map(str, DTYPES))}")
    M, H = x.shape
    F = w_gate.shape[1]
    want = {"w_gate": (H, F), "w_up": (H, F), "w_down": (F, H), "out": (M, H)}
    got = {"w_gate": w_gate, "w_up": w_up, "w_down": w_down, "out": out}
    if residual is not None:
        want["residual"], got["residual"] = (M, H), residual
    if h is not None:
        want["h"], got["h"] = (M, F), h
    if inbox is not None:  # its shape: once the tiles are known (add_tp_mlp)
        want["inbox"], got["inbox"] = None, inbox
    for name, shape in want.items():
        t = got[name]
        if shape is not None and tuple(t.shape) != shape:
            raise ValueError(f"add_tp_mlp: {name} has shape {tuple(t.shape)}, expected "
                             f"{shape} for x {tuple(x.shape)} and w_gate {tuple(w_gate.shape)}")
        if t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"add_tp_mlp: {name} is {t.dtype} on {t.device}, x is {x.dtype} "
                             f"on {x.device}")


def add_tp_mlp(graph: TaskGraph, x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
               w_down: torch.Tensor, out: torch.Tensor, *, residual: torch.Tensor | None = None,
               h: torch.Tensor | None = None, inbox: torch.Tensor | None = None,
               blocks: MlpBlocks | None = None, name: str = "mlp",
               layout: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Add the three tasks of one MLP (see the module docstring) to ``graph``; return its
    scratch buffers ``(h, inbox)`` so that later layers can reuse them.

    ``x`` is fp16, bf16 or fp32, and so is every other tensor. ``h`` (``[M, F]``, local)
    and ``inbox`` (symmetric ``[world_size * S * M, H]``, ``S`` the ``split_k`` chunks of
    ``F`` that have columns; allocating it is collective) are made when not given. ``out``
    may be ``x`` (in place: the ``reduce`` tiles then also wait for the ``up`` tiles that
    read their rows) or the next layer's input. ``blocks``: the tile sizes; by default
    those that ``tune_mlp`` (``task/tp_mlp_tuner.py``) cached for these shapes, dtype,
    world size and ``layout``, else :func:`default_blocks` for its rows, as rank 0 finds
    them (its cache, device and weights), on every rank. ``layout``: the weights' layout
    the tuned tiles are looked up for (``tune.decisions.B_LAYOUTS``; default: the one the
    three weights share, ``tune.decisions.common_layout``); layers sharing an inbox must
    take the same tiles, so :func:`add_tp_mlp_stack` passes its layers' common one. The
    call is collective when it takes rank 0's blocks or allocates the inbox: every rank
    then makes it with the same ``x`` shape and dtype and the same ``blocks``, and bad
    arguments on any rank raise ``ValueError`` on every rank (naming them) before any
    allocation."""
    rt = current()
    W = rt.world.world_size
    # a collective call (rank 0's tiles, an inbox to allocate): a rank refusing its own
    # arguments joins the agreement below with its error, so its peers raise naming it
    # instead of waiting for it
    collective = W > 1 and (blocks is None or inbox is None)
    with refused_together(WHAT, peers=collective):
        _check(x, w_gate, w_up, w_down, out, residual, h, inbox)
        if blocks is not None:
            blocks = _check_blocks(blocks)
        if layout is not None and layout not in B_LAYOUTS:
            raise ValueError(f"add_tp_mlp: layout must be None or one of "
                             f"{', '.join(B_LAYOUTS)}, got {layout!r}")
        check_int32_offsets(WHAT, x=x, w_gate=w_gate, w_up=w_up, w_down=w_down, out=out,
                            residual=residual)
    M, H = x.shape
    F = w_gate.shape[1]
    if collective:
        agree(WHAT, remember=False, x=(M, H), dtype=str(x.dtype), blocks=blocks,
              inbox=None if inbox is None else tuple(inbox.shape))
    if blocks is None:  # rank 0 decides: the ranks' caches on disk may differ
        layout = layout or common_layout(w_gate, w_up, w_down)
        blocks = rank0_decides(f"{WHAT}: tuned blocks", lambda: tuned_blocks(
            M, H, F, x.dtype, W, layout) or default_blocks(M, x.dtype, shared_memory(x.device)))
        blocks = _check_blocks(blocks)
    if h is None:
        h = torch.empty((M, F), dtype=x.dtype, device=x.device)
    bm, bn, bk, rn = blocks.block_m, blocks.block_n, blocks.block_k, blocks.reduce_n
    chunk, S = split_chunks(F, blocks)
    if inbox is None:
        inbox = empty((W * S * M, H), x.dtype, name=f"{graph.name}.{name}.inbox")
    elif tuple(inbox.shape) != (W * S * M, H):  # agreed: every rank raises
        raise ValueError(f"add_tp_mlp: inbox must be [{W * S * M}, {H}] (world size x "
                         f"{S} split-K slots x {M} rows) for these blocks, got "
                         f"{tuple(inbox.shape)}")
    check_int32_offsets(WHAT, h=h, inbox=inbox)
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    upcast = rt.world.backend == "cpu"
    wanted = tma_wanted(x.device, blocks.tma)
    up_tma = _gemm_operands(wanted, x, (bm, bk), (w_gate, w_up), (bk, bn))
    up_ops, up_flags = up_tma or ((x, w_gate, w_up), (False, False))
    dn = blocks.down_n or bn  # the down tiles' columns
    down_tma = _gemm_operands(wanted, h, (bm, bk), (w_down,), (bk, dn))
    down_ops, down_flags = down_tma or ((h, w_down), (False,))

    def box(t, n, block_n):
        return tiles.tile_box(t, M, n, bm, block_n)

    graph.add(
        f"{name}.up", tiles.gated_matmul_tile, *up_ops, h, M, F, H, *x.stride(),
        *w_gate.stride(), *w_up.stride(), *h.stride(), bm, bn, bk, precision, upcast,
        blocks.stages, up_tma is not None, *up_flags,
        tiles=tiles.num_tiles(M, F, bm, bn), warps=blocks.warps,
        reads=lambda t, r: (region(x, box(t, F, bn)[0]),
                            region(w_gate, (0, H), box(t, F, bn)[1]),
                            region(w_up, (0, H), box(t, F, bn)[1])),
        writes=lambda t, r: (region(h, *box(t, F, bn)),))

    down_mn = tiles.num_tiles(M, H, bm, dn)

    def down_box(t):  # rows, columns and K range of down tile t
        kc, mn = divmod(t, down_mn)
        rows, cols = box(mn, H, dn)
        return kc, rows, cols, (kc * chunk, min(F, (kc + 1) * chunk))

    def down_reads(t, r):
        _, rows, cols, ks = down_box(t)
        return region(h, rows, ks), region(w_down, ks, cols)

    def down_writes(t, r):
        kc, rows, cols, _ = down_box(t)
        slot = (r * S + kc) * M
        return tuple(region(inbox, (slot + rows[0], slot + min(rows[1], M)), cols, rank=q)
                     for q in range(W))

    graph.add(
        f"{name}.down", tiles.matmul_push_tile, *down_ops, inbox, M, H, F, chunk, S,
        *h.stride(), *w_down.stride(), *inbox.stride(), CTX, bm, dn, bk, precision, upcast,
        blocks.stages, down_tma is not None, *down_flags,
        tiles=S * down_mn, reads=down_reads, writes=down_writes,
        warps=blocks.warps)

    def reduce_reads(t, r):
        rows, cols = box(t, H, rn)
        stop = min(rows[1], M)
        regions = [region(inbox, (s * M + rows[0], s * M + stop), cols) for s in range(W * S)]
        if residual is not None:
            regions.append(region(residual, rows, cols))
        return regions

    res = residual if residual is not None else out
    graph.add(
        f"{name}.reduce", tiles.sum_slots_tile, inbox, res, out, M, H, W * S, *inbox.stride(),
        *res.stride(), *out.stride(), bm, rn, residual is not None,
        tiles=tiles.num_tiles(M, H, bm, rn), warps=blocks.warps,
        reads=reduce_reads,
        writes=lambda t, r: (region(out, *box(t, H, rn)),))
    return h, inbox


@dataclasses.dataclass(frozen=True)
class MlpStack:
    """What :func:`add_tp_mlp_stack` added: ``outs``, each layer's output (``out``, the
    last, is the stack's), and the scratch all layers share: ``h`` (local) and ``inbox``
    (symmetric; ``ditron.free`` it once no call of the graph runs any more)."""

    outs: list[torch.Tensor]
    h: torch.Tensor
    inbox: torch.Tensor

    @property
    def out(self) -> torch.Tensor:
        return self.outs[-1]


def add_tp_mlp_stack(graph: TaskGraph, x: torch.Tensor,
                     weights: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], *,
                     blocks: MlpBlocks | None = None, name: str = "layer",
                     inbox: torch.Tensor | None = None) -> MlpStack:
    """Add ``len(weights)`` (>= 1) chained MLPs (:func:`add_tp_mlp`; ``weights[i]``: this
    rank's ``(w_gate, w_up, w_down)`` of layer ``i``). Layer ``i`` takes the previous
    layer's output (``x`` for the first) as its input and its residual, ``x_{i+1} = x_i +
    all_reduce(silu(x_i Wg) * (x_i Wu) Wd)``; its outputs are new tensors like ``x``, its
    tasks are named ``{name}{i}.up`` ... ``inbox``: the symmetric scratch the layers share
    (:func:`inbox_shape`), made when not given; megakernels called one after another may
    share one (a call's peers write into it only once its rank has started that call).
    Every layer's operands are checked (``ValueError``; the layers must have as many ffn
    columns: they share ``h``) before the first layer is added, on every rank where that
    first call is collective (see :func:`add_tp_mlp`)."""
    if not weights:
        raise ValueError("add_tp_mlp_stack: no layers")
    # every layer's operands checked before the first layer's agreement (where that call is
    # collective: rank 0's tiles, an inbox to allocate): a rank refusing a later layer's
    # raised alone, its peers going on to allocate and compile without it
    collective = current().world.world_size > 1 and (blocks is None or inbox is None)
    with refused_together(WHAT, peers=collective):
        for i, layer in enumerate(weights):
            if not isinstance(layer, (tuple, list)) or len(layer) != 3:
                raise ValueError(f"add_tp_mlp_stack: layer {i} must be (w_gate, w_up, "
                                 f"w_down), got {type(layer).__name__}")
            _check(x, *layer, x, x, None, None)
            if layer[0].shape[1] != weights[0][0].shape[1]:  # one h for every layer
                raise ValueError(f"add_tp_mlp_stack: layer {i} has {layer[0].shape[1]} ffn "
                                 f"columns, layer 0 {weights[0][0].shape[1]}: the layers "
                                 f"share one h")
    outs: list[torch.Tensor] = []
    h = None
    # the layers share one inbox, so they take the tuned tiles of one layout: the one all
    # their weights share (a mix takes the default); bad weights: add_tp_mlp refuses them
    flat = [w for ws in weights for w in ws]
    layout = (common_layout(*flat) if all(isinstance(w, torch.Tensor) and w.dim() == 2
                                          for w in flat) else None)
    for i, (w_gate, w_up, w_down) in enumerate(weights):
        src = outs[-1] if outs else x
        outs.append(torch.empty_like(x))
        h, inbox = add_tp_mlp(graph, src, w_gate, w_up, w_down, outs[-1], residual=src, h=h,
                              inbox=inbox, blocks=blocks, name=f"{name}{i}", layout=layout)
    return MlpStack(outs, h, inbox)
