"""Tensor-parallel linear layers whose matmuls overlap their communication.

A transformer MLP (or attention's in / out projections) in Megatron-LM's sequence-parallel
style is ``RowParallelLinear(act(ColumnParallelLinear(x)))``: the column layer all-gathers
the sequence and multiplies by its output features (``ag_gemm``), the row layer multiplies
by its input features and reduce-scatters the sum back to the sequence split (``gemm_rs``);
in the backward pass the two swap roles. Without sequence parallelism the input and output
are replicated and the row layer all-reduces (``gemm_ar``). Layers are built inside a rank
(``ditron.launch`` or after ``ditron.init``) and belong to the world current then
(``layer.world``): they run in it whichever world is current (``ditron.use``), forward and
backward, so that activation checkpointing's recomputation in the backward pass runs there
too; a layer whose world this process no longer has raises ``RuntimeError``. Parameters
go on ``device``, by default the world's device (inside ``with torch.device(...)`` too:
pass ``device="meta"`` for a layer without storage, then ``to_empty`` and
``reset_parameters``).
"""

from __future__ import annotations

import contextlib
import math

import torch

from ..ops.tp_gemm import METHODS
from ..runtime.integers import check_int
from ..runtime.world import World, use, world, world_over
from . import functional as F


def _shard(in_features: int, out_features: int, split: str) -> tuple[int, int, int]:
    """``(in_features, out_features, this rank's share of the split ones)``, the split
    ones being ``"in_features"`` or ``"out_features"``."""
    sizes = {what: check_int(value, f"ditron.nn: {what}", 1)
             for what, value in (("in_features", in_features), ("out_features", out_features))}
    features, W = sizes[split], world().world_size
    if features % W:
        raise ValueError(f"ditron.nn: {split} = {features} does not split over {W} ranks")
    return sizes["in_features"], sizes["out_features"], features // W


def shard_generator(device: torch.device, rank: int) -> torch.Generator:
    """The generator a new sharded layer draws rank ``rank``'s shard from: seeded by one
    draw of torch's default generator (the same draw on every rank, which stays in step for
    what is built next) plus ``rank``, the rank in the layer's world. A layer's shards
    differ even where every rank seeds torch alike (drawn from the default generator, they
    were equal: ``W`` equal blocks, which stay equal in training), and the same rank of two
    worlds (data-parallel replicas of a tensor-parallel layer) draws the same shard. The draw
    is torch's CPU generator's under any ``with torch.device(...)`` (under ``"meta"`` it
    raised: a meta tensor has no value)."""
    seed = int(torch.randint(0, 2 ** 62, (), device="cpu"))
    kind = "cuda" if device.type == "cuda" else "cpu"  # "meta": nothing is drawn
    return torch.Generator(device=device if kind == "cuda" else kind).manual_seed(seed + rank)


def in_world(w: World, layer: str) -> contextlib.AbstractContextManager:
    """Where ``layer`` (its class name), built in the world ``w``, runs: ``ditron.use(w)``
    unless ``w`` is current. ``RuntimeError`` if this process no longer has ``w``."""
    if world() == w:
        return contextlib.nullcontext()
    try:
        alive = world_over(w.global_ranks) == w
    except ValueError:
        alive = False
    if not alive:
        raise RuntimeError(f"ditron.nn: {layer} was built in the world over global ranks "
                           f"{list(w.global_ranks)}, which this process no longer has "
                           f"(shut down): build the layer again in a current world")
    return use(w)


class _ParallelLinear(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, weight_shape: tuple[int, int],
                 bias_size: int | None, sequence_parallel: bool, method: str, device,
                 dtype) -> None:
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"ditron.nn: method must be one of {METHODS}, got {method!r}")
        self.in_features, self.out_features = in_features, out_features
        self.sequence_parallel, self.method = sequence_parallel, method
        self.world = world()  # the shards split over its ranks
        kw = {"device": device if device is not None else self.world.device, "dtype": dtype}
        self.weight = torch.nn.Parameter(torch.empty(weight_shape, **kw))
        self.bias = (torch.nn.Parameter(torch.empty(bias_size, **kw))
                     if bias_size is not None else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``torch.nn.Linear``'s weight distribution for the whole layer (uniform, bound
        ``1/sqrt(in_features)``), each rank's shard its own draw (:func:`shard_generator`;
        every rank resets its shard, as every rank builds the layer); biases start at zero
        (so a replicated bias is the same on every rank)."""
        bound = 1.0 / math.sqrt(self.in_features)
        gen = shard_generator(self.weight.device, self.world.rank)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound, generator=gen)
            if self.bias is not None:
                self.bias.zero_()

    def _mode(self) -> str:
        """The layer's own settings in its repr, after ``sequence_parallel``."""
        return ""

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, sequence_parallel={self.sequence_parallel}, "
                f"{self._mode()}method={self.method!r}, shard={tuple(self.weight.shape)}, "
                f"world={list(self.world.global_ranks)}")


class ColumnParallelLinear(_ParallelLinear):
    """``y = x @ weight.T + bias`` with the output features split over ranks: this rank
    holds ``weight[r*out/W:(r+1)*out/W]`` and the matching bias slice.

    ``sequence_parallel=True`` (default): ``x`` is this rank's ``[m, ..., in]`` slice of the
    rows (dim 0); returns ``[W*m, ..., out/W]`` (``ag_gemm``; ``keep_gathered`` keeps the
    gathered input for the weight's gradient instead of gathering it again). Otherwise ``x``
    is the same ``[..., in]`` on every rank and the result ``[..., out/W]``; the input's
    gradient is summed over ranks.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 sequence_parallel: bool = True, keep_gathered: bool = True,
                 method: str = "auto", device=None, dtype=None) -> None:
        in_features, out_features, n = _shard(in_features, out_features, "out_features")
        super().__init__(in_features, out_features, (n, in_features), n if bias else None,
                         sequence_parallel, method, device, dtype)
        self.keep_gathered = keep_gathered

    def _mode(self) -> str:
        return f"keep_gathered={self.keep_gathered}, " if self.sequence_parallel else ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with in_world(self.world, "ColumnParallelLinear"):
            if self.sequence_parallel:
                return F.all_gather_linear(x, self.weight, self.bias,
                                           keep_gathered=self.keep_gathered,
                                           method=self.method)
            if not isinstance(x, torch.Tensor) or x.dim() == 0 \
                    or x.shape[-1] != self.in_features:  # the peers told, in the agreement
                F._refuse_with("copy_to_tensor_parallel", x, ValueError(  # of x's need
                    f"ditron.nn: ColumnParallelLinear(sequence_parallel=False) takes [..., "
                    f"{self.in_features}] (replicated), got {tuple(getattr(x, 'shape', ()))}"))
            return torch.nn.functional.linear(F.copy_to_tensor_parallel(x), self.weight,
                                              self.bias)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, **kwargs) -> ColumnParallelLinear:
        """This rank's shard of ``linear`` (which every rank must hold the same of)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None,
                    dtype=kwargs.pop("dtype", linear.weight.dtype), **kwargs)
        rows = slice(world().rank * layer.weight.shape[0],
                     (world().rank + 1) * layer.weight.shape[0])
        with torch.no_grad():
            layer.weight.copy_(linear.weight[rows])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias[rows])
        return layer


class RowParallelLinear(_ParallelLinear):
    """``y = x @ weight.T + bias`` with the input features split over ranks: this rank
    holds ``weight[:, r*in/W:(r+1)*in/W]`` and the whole bias (the same on every rank).

    ``x``: ``[M, ..., in/W]``, this rank's features (a column layer's output).
    ``sequence_parallel=True`` (default): returns this rank's ``[M/W, ..., out]`` rows of the
    sum over ranks (``gemm_rs``; ``M`` must divide by ``W``); the bias's gradient is
    summed over ranks. Otherwise the whole ``[M, ..., out]`` on every rank (``gemm_ar``).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 sequence_parallel: bool = True, method: str = "auto", device=None,
                 dtype=None) -> None:
        in_features, out_features, k = _shard(in_features, out_features, "in_features")
        super().__init__(in_features, out_features, (out_features, k),
                         out_features if bias else None, sequence_parallel, method, device,
                         dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with in_world(self.world, "RowParallelLinear"):
            if self.sequence_parallel:
                return F.linear_reduce_scatter(x, self.weight, self.bias, method=self.method)
            return F.linear_all_reduce(x, self.weight, self.bias, method=self.method)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, **kwargs) -> RowParallelLinear:
        """This rank's shard of ``linear`` (which every rank must hold the same of)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None,
                    dtype=kwargs.pop("dtype", linear.weight.dtype), **kwargs)
        k = layer.weight.shape[1]
        with torch.no_grad():
            layer.weight.copy_(linear.weight[:, world().rank * k:(world().rank + 1) * k])
            if layer.bias is not None:
                layer.bias.copy_(linear.bias)
        return layer
