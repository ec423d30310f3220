"""DESIGN.md's public API contract, name by name, as a user outside the team calls it.

Each name is imported from where DESIGN.md puts it; its signature is compared with the
contract's (names, order, kinds, defaults); every op is compared with torch /
torch.distributed on fresh random inputs (a new seed per test run, named in every message)
with NaN-poisoned fresh memory; documented errors are checked to come before any Triton
kernel starts, and the ranks to stay in step afterwards. Rank functions group many checks
per launch (a launch costs more than a check) and return what they checked.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ditron

from .ops.poison import poison_empty

ROOT = Path(__file__).resolve().parents[1]
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1e-2, 1e-2)}
GEMM_TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
_EMPTY = inspect.Parameter.empty
ANY = object()  # the contract names no default: any (or none) will do
P = inspect.Parameter


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


# -- names and signatures ------------------------------------------------------------------
#: DESIGN.md's signatures: (name, kind, default) per parameter, in order
CONTRACT = {
    "launch": [("fn", P.POSITIONAL_OR_KEYWORD, _EMPTY),
               ("world_size", P.POSITIONAL_OR_KEYWORD, _EMPTY),
               ("args", P.VAR_POSITIONAL, _EMPTY),
               ("backend", P.KEYWORD_ONLY, None),
               ("kw", P.VAR_KEYWORD, _EMPTY)],
    "init": [("backend", P.POSITIONAL_OR_KEYWORD, None)],
    "world": [],
    "empty": [("shape", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("dtype", P.POSITIONAL_OR_KEYWORD, ANY)],
    "zeros": [("shape", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("dtype", P.POSITIONAL_OR_KEYWORD, ANY)],
    "peer": [("t", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("rank", P.POSITIONAL_OR_KEYWORD, _EMPTY)],
    "barrier": [],
}
OPS_CONTRACT = {
    "all_gather": [("x", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("dim", P.POSITIONAL_OR_KEYWORD, 0)],
    "reduce_scatter": [("x", P.POSITIONAL_OR_KEYWORD, _EMPTY),
                       ("dim", P.POSITIONAL_OR_KEYWORD, 0)],
    "all_reduce": [("x", P.POSITIONAL_OR_KEYWORD, _EMPTY),
                   ("method", P.POSITIONAL_OR_KEYWORD, "auto")],
    "all_to_all": [("x", P.POSITIONAL_OR_KEYWORD, _EMPTY),
                   ("in_splits", P.POSITIONAL_OR_KEYWORD, None),
                   ("out_splits", P.POSITIONAL_OR_KEYWORD, None)],
    "ag_gemm": [("a", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("b", P.POSITIONAL_OR_KEYWORD, _EMPTY),
                # docs/tp_gemm.md: ``ag_gemm(..., return_gathered=True)`` -> (c, gathered a)
                ("return_gathered", P.KEYWORD_ONLY, False)],
    "gemm_rs": [("a", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("b", P.POSITIONAL_OR_KEYWORD, _EMPTY)],
    "gemm_ar": [("a", P.POSITIONAL_OR_KEYWORD, _EMPTY), ("b", P.POSITIONAL_OR_KEYWORD, _EMPTY)],
}


def _check_signature(where: str, fn, contract) -> None:
    """``fn``'s parameters are ``contract``'s, in order, of the same kinds and defaults
    (``ANY``: any default or none), plus perhaps further keyword-only ones with defaults,
    which no call the contract allows can reach."""
    params = list(inspect.signature(fn).parameters.values())
    got = [(p.name, p.kind, p.default) for p in params]
    contract_names = [name for name, _, _ in contract]
    rest = params[len(contract):]
    head = params[:len(contract)]
    # extra keyword-only parameters may sit before **kw (launch's ``groups``)
    if contract and contract[-1][1] == P.VAR_KEYWORD:
        head = [p for p in params if p.kind != P.KEYWORD_ONLY or p.name in contract_names]
        rest = [p for p in params if p not in head]
    assert len(head) == len(contract), f"{where}{inspect.signature(fn)}: expected {contract}"
    for p, (name, kind, default) in zip(head, contract, strict=True):
        assert name is None or p.name == name, f"{where}: parameter {p.name!r} != {name!r}: {got}"
        assert p.kind == kind, f"{where}: {p.name} is {p.kind}, the contract has {kind}"
        assert default is ANY or p.default == default, \
            f"{where}: {p.name} defaults to {p.default!r}, not {default!r}"
    for p in rest:
        assert p.kind in (P.KEYWORD_ONLY, P.VAR_KEYWORD) and (
            p.kind == P.VAR_KEYWORD or p.default is not _EMPTY), \
            f"{where}: extra parameter {p} is not an optional keyword: {got}"


def test_contract_names_import_with_their_signatures():
    for name, contract in CONTRACT.items():
        assert name in ditron.__all__, f"ditron.__all__ lacks {name}"
        _check_signature(f"ditron.{name}", getattr(ditron, name), contract)
    import ditron.ops as ops
    from ditron import ops as ops_attr  # the lazy attribute and the module agree

    assert ops is ops_attr is ditron.ops
    for name, contract in OPS_CONTRACT.items():
        assert name in ops.__all__, f"ditron.ops.__all__ lacks {name}"
        op = getattr(ops, name)
        assert callable(op) and op.__doc__, f"ditron.ops.{name} has no docstring"
        _check_signature(f"ditron.ops.{name}", op, contract)
        exec(f"from ditron.ops import {name}", {})  # importable by name too
    fields = [f for f in ("rank", "world_size", "local_rank", "local_world_size", "device",
                          "backend") if f not in ditron.World.__dataclass_fields__]
    assert not fields, f"ditron.World lacks {fields}"
    assert inspect.signature(ditron.init).return_annotation in (ditron.World, "World")
    assert inspect.signature(ditron.world).return_annotation in (ditron.World, "World")
    for name in ("peer",):
        assert inspect.signature(getattr(ditron, name)).return_annotation in (
            torch.Tensor, "torch.Tensor")


DIR_LISTS = """
import ditron, ditron.ops
print(repr((sorted(set(ditron.ops.__all__) - set(dir(ditron.ops))),
            sorted({"ops", "nn", "task", "trace"} - set(dir(ditron))))))
"""


def test_dir_lists_the_lazily_loaded_names_before_their_first_use():
    """``dir(ditron.ops)`` (``help``, tab completion) lists every op, and ``dir(ditron)``
    the lazy subpackages, in a fresh process where none was used yet."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", DIR_LISTS], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == repr(([], [])), out.stdout


def test_uninitialised_process_gets_a_clear_error():
    """Before ``init`` every name that needs a world raises ``RuntimeError`` saying so."""
    if ditron.is_initialized():
        pytest.skip("this process has a world")
    x = torch.ones(2, 2)
    for call in (ditron.world, ditron.barrier, lambda: ditron.empty((2,), torch.float32),
                 lambda: ditron.zeros((2,), torch.float32), lambda: ditron.ops.all_gather(x),
                 lambda: ditron.ops.reduce_scatter(x), lambda: ditron.ops.all_reduce(x),
                 lambda: ditron.ops.all_to_all(x), lambda: ditron.ops.ag_gemm(x, x),
                 lambda: ditron.ops.gemm_rs(x, x), lambda: ditron.ops.gemm_ar(x, x)):
        with pytest.raises(RuntimeError, match="ditron.init"):
            call()


# -- launch --------------------------------------------------------------------------------
def _echo(first, second, *, key):
    w = ditron.world()
    return (w.rank, w.world_size, first, second, key)


def _fail_on(bad: int):
    if ditron.world().rank == bad:
        raise LookupError(f"failing on purpose on rank {bad}")
    ditron.barrier()  # the others wait for the failing rank: the launch must end them
    return "unreachable"


def test_launch_runs_fn_on_every_rank_and_raises_with_the_rank(backend):
    """``launch(fn, world_size, *args, backend=None, **kw)``: the results by rank; an error
    on a rank comes back as itself, with that rank."""
    assert ditron.launch(_echo, 3, "p", 2, backend=backend, key="v") == [
        (r, 3, "p", 2, "v") for r in range(3)]
    assert ditron.launch(_echo, 1, 1, second=2, key=3, backend=backend) == [(0, 1, 1, 2, 3)]
    with pytest.raises(LookupError, match="failing on purpose on rank 2") as info:
        ditron.launch(_fail_on, 3, 2, backend=backend)
    assert info.value.rank == 2
    assert any("rank 2" in note for note in getattr(info.value, "__notes__", []))


def _returns_symmetric():
    w = ditron.world()
    t = ditron.zeros((4,), torch.float32)
    t.fill_(w.rank + 1)
    ditron.barrier()
    left = ditron.peer(t, (w.rank - 1) % w.world_size)
    return t, left[1:3]


def test_launch_returns_symmetric_tensors_by_value():
    """A heap tensor or a peer view comes back by value (multiprocessing's reducers shared
    its storage by a descriptor already closed: OSError on the rank)."""
    got = ditron.launch(_returns_symmetric, 2, backend="cpu")
    for r, (mine, left) in enumerate(got):
        assert torch.equal(mine.cpu(), torch.full((4,), r + 1.0))
        assert torch.equal(left.cpu(), torch.full((2,), (r - 1) % 2 + 1.0))


class _SlowToLoad:
    """A result part whose unpickling takes a while (as a large result's would)."""

    def __reduce__(self):
        return (time.sleep, (2.0,))


def _returns_tensors_after_slow_part():
    return [_SlowToLoad(), torch.full((3,), float(ditron.world().rank))]


def test_launch_returns_tensors_whatever_the_time_to_unpickle():
    """Tensors come back by value (multiprocessing's reducers had the launcher fetch each
    from the rank while unpickling, which failed once the rank had exited)."""
    got = ditron.launch(_returns_tensors_after_slow_part, 2, backend="cpu")
    assert [r[1].tolist() for r in got] == [[0.0] * 3, [1.0] * 3]


# -- init, world, symmetric tensors, peer, barrier ------------------------------------------
def _runtime_case(backend: str) -> int:
    w = ditron.world()
    W, me = w.world_size, w.rank
    assert isinstance(w, ditron.World)
    assert (w.rank, w.world_size) == (dist.get_rank(), dist.get_world_size())
    assert (w.local_rank, w.local_world_size) == (me, W), w  # one node
    assert w.backend == backend and w.device.type == backend, w
    assert ditron.init() == w and ditron.init(backend) == w  # inside a launch: the world
    other = "cuda" if backend == "cpu" else "cpu"
    try:
        ditron.init(other)
        raise AssertionError(f"ditron.init({other!r}) in a {backend} world was accepted")
    except RuntimeError:
        pass
    checks = 0
    # empty / zeros: symmetric tensors of the asked shape and dtype, on the rank's device
    for shape, dtype in (((2, 3), torch.float16), (5, torch.int64), ([0, 4], torch.float32),
                         ((3,), torch.bfloat16)):
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        e = ditron.empty(shape, dtype)
        z = ditron.zeros(shape, dtype)
        for t in (e, z):
            assert isinstance(t, torch.Tensor) and tuple(t.shape) == dims and t.dtype == dtype
            assert t.device == w.device
        assert not z.any(), f"ditron.zeros{shape} is not zero: {z}"
        checks += 1
    # peer: a host view of rank q's copy, which reads and writes q's memory
    z = ditron.zeros((2, 3), torch.int32)
    z.fill_(me + 1)
    ditron.barrier()
    for q in range(W):
        view = ditron.peer(z, q)
        assert isinstance(view, torch.Tensor) and view.shape == z.shape and view.dtype == z.dtype
        assert torch.equal(view.cpu(), torch.full((2, 3), q + 1, dtype=torch.int32)), (q, view)
        checks += 1
    assert ditron.peer(z, me).data_ptr() == z.data_ptr()  # my own copy is z itself
    right = (me + 1) % W
    assert torch.equal(ditron.peer(z[1, 1:], right).cpu(),
                       torch.full((2,), right + 1, dtype=torch.int32))
    assert torch.equal(ditron.peer(z.t(), right), ditron.peer(z, right).t())
    ditron.barrier()
    ditron.peer(z, (me + 1) % W)[0, 0] = 100 + me  # into my right neighbour's copy
    ditron.barrier()
    assert int(z[0, 0]) == 100 + (me - 1) % W, z
    # barrier: what rank 0 writes late, before its barrier, every rank sees after its own
    flag = ditron.zeros((1,), torch.int64)
    ditron.barrier()
    if me == 0:
        time.sleep(0.3)
        for q in range(W):
            ditron.peer(flag, q).fill_(42)
    ditron.barrier()
    assert int(flag[0]) == 42, "ditron.barrier returned before rank 0 reached it"
    checks += 2
    # errors, on every rank (disagreements need two ranks); the ranks stay in step after them
    errors = [(lambda: ditron.empty((1 << 42,), torch.float32), RuntimeError),
              (lambda: ditron.peer(z, W), ValueError),
              (lambda: ditron.peer(z, -1), ValueError),
              (lambda: ditron.peer(torch.zeros(2, device=w.device), 0), ValueError)]
    if W > 1:
        errors += [(lambda: ditron.empty((2 + me,), torch.float32), ValueError),
                   (lambda: ditron.zeros((4,), torch.float32 if me else torch.float16),
                    ValueError)]
    for call, exc in errors:
        try:
            call()
        except exc:
            checks += 1
        else:
            raise AssertionError(f"no {exc.__name__}")
    ditron.barrier()
    after = ditron.zeros((3,), torch.float32)
    after.fill_(me)
    ditron.barrier()
    assert sum(float(ditron.peer(after, q)[0]) for q in range(W)) == W * (W - 1) / 2
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_world_symmetric_tensors_peer_and_barrier(world_size, backend):
    got = ditron.launch(_runtime_case, world_size, backend, backend=backend)
    assert got == [10 + world_size + 2 * (world_size > 1)] * world_size, got


LONE = """
import torch, ditron
try:
    ditron.init("no-such-backend")
except ValueError:
    pass
else:
    raise SystemExit("init accepted an unknown backend")
w = ditron.init()
x = torch.randn(3, 4)
assert ditron.init() is w and ditron.world() == w
assert torch.equal(ditron.ops.all_gather(x), x) and torch.equal(ditron.ops.all_reduce(x), x)
print(repr((w.rank, w.world_size, w.local_rank, w.local_world_size, w.device.type, w.backend)))
ditron.shutdown()
"""


def test_init_in_a_lone_process():
    """``init()`` outside any launcher: rank 0 of 1, backend by hardware."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "DITRON_BACKEND", "RANK", "WORLD_SIZE",
                        "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", LONE], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    assert out.stdout.strip().splitlines()[-1] == repr((0, 1, 0, 1, kind, kind))


# -- collectives -----------------------------------------------------------------------------
def _host():
    from ditron.runtime.world import current

    return current().host_group


def _gathered(x: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``x`` as float64 on the host (dist.all_gather over gloo)."""
    cpu = x.detach().to("cpu", torch.float64).contiguous()
    parts = [torch.empty_like(cpu) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, cpu, group=_host())
    return parts


def _summed(x: torch.Tensor) -> torch.Tensor:
    """``dist.all_reduce`` (sum) of ``x`` in float64 on the host."""
    cpu = x.detach().to("cpu", torch.float64).clone()
    dist.all_reduce(cpu, group=_host())
    return cpu


def _close(what: str, got, ref: torch.Tensor, dtype: torch.dtype, gemm: bool = False,
           exact: bool = False) -> None:
    """``got`` equals ``ref`` (float64) in ``dtype``: within the dtype's tolerance, a GEMM's
    relative to its largest value, or bit for bit (``exact``: ops that only move bytes)."""
    assert isinstance(got, torch.Tensor), f"{what}: got {type(got).__name__}"
    assert tuple(got.shape) == tuple(ref.shape), f"{what}: shape {tuple(got.shape)} != " \
                                                 f"{tuple(ref.shape)}"
    assert got.dtype == dtype, f"{what}: dtype {got.dtype} != {dtype}"
    got = got.detach().cpu().double()
    assert not got.isnan().any(), f"{what}: unwritten (NaN) elements"
    if gemm:
        scale = max(ref.abs().max().item() if ref.numel() else 0.0, 1.0)
        err = (got - ref).abs().max().item() if ref.numel() else 0.0
        assert err <= GEMM_TOL[dtype] * scale, f"{what}: max error {err}, scale {scale}"
        return
    if exact:
        want = ref.to(dtype).double()
        assert torch.equal(got, want), f"{what}: not bit-exact, max error " \
                                       f"{(got - want).abs().max().item()}"
        return
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got, ref.to(dtype).double(), rtol=rtol, atol=atol, msg=what)


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the op's result ``a`` is (a view of) its input ``b`` (ops return new tensors)."""
    return a.numel() > 0 and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _case_start(seed: int) -> tuple[int, int, torch.device, torch.Generator]:
    """Poison fresh allocations; ``(W, rank, device, this rank's generator for seed)``."""
    poison_empty()
    w = ditron.world()
    return w.world_size, w.rank, w.device, torch.Generator().manual_seed(seed + 7919 * w.rank)


def _collectives_case(seed: int) -> int:
    W, me, dev, g = _case_start(seed)
    ops = ditron.ops
    checks = 0
    kept = []  # (result, its value): later calls must not change a returned tensor
    for it, dtype in enumerate((torch.float32, torch.bfloat16, torch.float32)):
        tag = f"seed {seed} call {it} {dtype}"

        def rand(*shape, dtype=dtype):
            return torch.randn(*shape, generator=g).to(dtype).to(dev)

        # all_gather(x, dim=0) == torch.cat(dist.all_gather(x), dim); any dim, strided x
        x = rand(3, 5, 2)
        before = x.clone()
        for d in (0, 1, -1):
            got = ops.all_gather(x, d)
            _close(f"all_gather dim {d} {tag}", got, torch.cat(_gathered(x), d), dtype,
                   exact=True)
            kept.append((got, got.clone()))
        xt = rand(4, 3).t()  # not contiguous
        _close(f"all_gather strided {tag}", ops.all_gather(xt, dim=1),
               torch.cat(_gathered(xt), 1), dtype, exact=True)
        _close(f"all_gather empty {tag}", ops.all_gather(rand(0, 3)), torch.zeros(0, 3), dtype,
               exact=True)
        assert torch.equal(x, before), f"all_gather modified its input ({tag})"
        assert not _shares_memory(ops.all_gather(x), x), f"all_gather returned x ({tag})"
        # out=: filled and returned
        out = torch.empty((W * 3, 5, 2), dtype=dtype, device=dev)
        assert ops.all_gather(x, out=out) is out, "all_gather(out=) returned another tensor"
        _close(f"all_gather out {tag}", out, torch.cat(_gathered(x), 0), dtype, exact=True)
        checks += 6
        # reduce_scatter(x, dim=0) == dist.all_reduce(x).chunk(W, dim)[rank]
        for d, shape in ((0, (2 * W, 3)), (1, (3, 2 * W, 2)), (-1, (5, W))):
            x = rand(*shape)
            before = x.clone()
            got = ops.reduce_scatter(x, d)
            _close(f"reduce_scatter dim {d} {tag}", got, _summed(x).chunk(W, d)[me], dtype)
            assert torch.equal(x, before), f"reduce_scatter modified its input ({tag})"
            assert not _shares_memory(got, x), f"reduce_scatter returned x ({tag})"
            kept.append((got, got.clone()))
        x = rand(3, 2 * W).t()
        _close(f"reduce_scatter strided {tag}", ops.reduce_scatter(x),
               _summed(x).chunk(W, 0)[me], dtype)
        out = torch.empty((2, 3), dtype=dtype, device=dev)
        x = rand(2 * W, 3)
        assert ops.reduce_scatter(x, out=out) is out, "reduce_scatter(out=) returned another"
        _close(f"reduce_scatter out {tag}", out, _summed(x).chunk(W, 0)[me], dtype)
        checks += 5
        # all_reduce(x, method) == dist.all_reduce(x.clone()); a new tensor, x unchanged
        x = rand(7, 3)  # 21 elements: no world size above 1 divides them
        before, ref = x.clone(), _summed(x)
        for method in ("one_shot", "two_shot", "auto"):
            got = ops.all_reduce(x, method)
            _close(f"all_reduce {method} {tag}", got, ref, dtype)
            assert not _shares_memory(got, x), f"all_reduce returned x ({tag})"
            kept.append((got, got.clone()))
        _close(f"all_reduce default {tag}", ops.all_reduce(x), ref, dtype)
        _close(f"all_reduce strided {tag}", ops.all_reduce(x.t()), ref.t(), dtype)
        assert torch.equal(x, before), f"all_reduce modified its input ({tag})"
        checks += 5
        # all_to_all(x, in_splits, out_splits) == dist.all_to_all_single
        ins = torch.randint(0, 4, (W,), generator=g)
        ins[(me + it) % W] = 0
        if it == 2 and me == W - 1:
            ins.zero_()  # a rank that sends nothing at all
        outs = torch.empty_like(ins)
        dist.all_to_all_single(outs, ins.clone(), group=_host())
        x = rand(int(ins.sum()), 2, 3)
        ref = torch.empty(int(outs.sum()), 2, 3, dtype=torch.float64)
        dist.all_to_all_single(ref, x.cpu().double(), outs.tolist(), ins.tolist(), group=_host())
        before = x.clone()
        got = ops.all_to_all(x, ins.tolist(), outs.tolist())
        _close(f"all_to_all {ins.tolist()} {tag}", got, ref, dtype, exact=True)
        kept.append((got, got.clone()))
        _close(f"all_to_all no out_splits {tag}", ops.all_to_all(x, ins.tolist()), ref, dtype,
               exact=True)
        assert torch.equal(x, before), f"all_to_all modified its input ({tag})"
        x = rand(2 * W, 3)  # no splits: even
        ref = torch.cat([p.chunk(W)[me] for p in _gathered(x)])
        got = ops.all_to_all(x)
        _close(f"all_to_all even {tag}", got, ref, dtype, exact=True)
        assert not _shares_memory(got, x), f"all_to_all returned x ({tag})"
        checks += 3
    _check_unchanged(kept, seed)
    return checks


def _check_unchanged(kept: list, seed: int) -> None:
    """Every returned tensor still holds what it held when returned (no later call wrote it)."""
    for got, value in kept:
        assert torch.equal(got, value), f"a returned tensor changed in later calls (seed {seed})"


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_collectives_equal_torch_distributed(world_size, backend):
    seed = _seed()
    got = ditron.launch(_collectives_case, world_size, seed, backend=backend)
    assert got == [57] * world_size, f"seed {seed}"


def _empty_splits_case(seed: int) -> int:
    """``all_to_all`` given empty split lists, as ``dist.all_to_all_single`` takes them."""
    W, me, dev, g = _case_start(seed)
    checks = 0
    empty = torch.tensor([], dtype=torch.int64)
    for ins, outs in (([], []), ((), None), (None, []), ([2] * W, ()), (empty, empty)):
        x = torch.randn(2 * W, 3, generator=g).to(dev)
        ref = torch.empty(2 * W, 3, dtype=torch.float64)
        # torch: "if specified None or empty, dim 0 ... must divide equally by world_size"
        dist.all_to_all_single(ref, x.cpu().double(), [], [], group=_host())
        _close(f"all_to_all(x, {ins!r}, {outs!r}) (seed {seed})",
               ditron.ops.all_to_all(x, ins, outs), ref, torch.float32, exact=True)
        checks += 1
    return checks


@pytest.mark.parametrize("world_size", [1, 3])
def test_all_to_all_reads_empty_splits_as_torch_does(world_size, backend):
    """``all_to_all(x, in_splits, out_splits)`` is "like torch all_to_all_single", which
    reads an empty list of split sizes as none given (an even split): ValueError before."""
    seed = _seed()
    got = ditron.launch(_empty_splits_case, world_size, seed, backend=backend)
    assert got == [5] * world_size, f"seed {seed}"


# -- overlapped GEMMs ------------------------------------------------------------------------
def _gemms_case(seed: int) -> int:
    W, me, dev, g = _case_start(seed)
    ops = ditron.ops
    checks = 0
    kept = []
    for it, dtype in enumerate((torch.float32, torch.bfloat16, torch.float32)):
        tag = f"seed {seed} call {it} {dtype}"

        def rand(*shape, dtype=dtype):
            return torch.randn(*shape, generator=g).to(dtype).to(dev)

        # ag_gemm(a, b) == all_gather(a, dim=0) @ b; a: [m, K] per rank, b: any strides
        m, K, N = 5, 7, 6
        a, b = rand(m, K), rand(N, K).t()
        before = a.clone()
        full = torch.cat(_gathered(a))
        ref = full @ b.cpu().double()
        c = ops.ag_gemm(a, b)
        _close(f"ag_gemm {tag}", c, ref, dtype, gemm=True)
        both = ops.ag_gemm(a, b, return_gathered=True)
        assert isinstance(both, tuple) and len(both) == 2, f"return_gathered: {type(both)}"
        _close(f"ag_gemm return_gathered c {tag}", both[0], ref, dtype, gemm=True)
        _close(f"ag_gemm return_gathered a {tag}", both[1], full, dtype, exact=True)
        assert torch.equal(a, before), f"ag_gemm modified a ({tag})"
        assert not _shares_memory(both[1], a), f"ag_gemm's gathered a is a itself ({tag})"
        kept += [(c, c.clone()), (both[1], both[1].clone())]
        b_step = rand(K, 2 * N)[:, ::2]  # another layout of b
        _close(f"ag_gemm b[:, ::2] {tag}", ops.ag_gemm(a, b_step), full @ b_step.cpu().double(),
               dtype, gemm=True)
        checks += 4
        # gemm_rs(a, b) == reduce_scatter(a @ b, dim=0); a: [M, K/W], b: [K/W, N]
        M, k = 3 * W, 4
        a, b = rand(M, k), rand(N, k).t()
        part = a.cpu().double() @ b.cpu().double()
        got = ops.gemm_rs(a, b)
        _close(f"gemm_rs {tag}", got, _summed(part).chunk(W)[me], dtype, gemm=True)
        kept.append((got, got.clone()))
        # gemm_ar(a, b) == all_reduce(a @ b); M not a multiple of W or of a tile
        a = rand(5, k)
        got = ops.gemm_ar(a, b)
        _close(f"gemm_ar {tag}", got, _summed(a.cpu().double() @ b.cpu().double()), dtype,
               gemm=True)
        kept.append((got, got.clone()))
        checks += 2
    # zero sizes: an empty shard, no output columns, no reduction dimension
    f32 = torch.float32
    zeros = torch.zeros
    cases = (
        ("ag_gemm m=0", lambda: ops.ag_gemm(zeros(0, 3, device=dev), zeros(3, 4, device=dev)),
         zeros(0, 4)),
        ("ag_gemm K=0", lambda: ops.ag_gemm(zeros(2, 0, device=dev), zeros(0, 4, device=dev)),
         zeros(2 * W, 4)),
        ("ag_gemm K=0 gathered", lambda: ops.ag_gemm(zeros(2, 0, device=dev),
                                                     zeros(0, 4, device=dev),
                                                     return_gathered=True)[1], zeros(2 * W, 0)),
        ("gemm_rs M=0", lambda: ops.gemm_rs(zeros(0, 3, device=dev), zeros(3, 4, device=dev)),
         zeros(0, 4)),
        ("gemm_rs K=0", lambda: ops.gemm_rs(zeros(2 * W, 0, device=dev),
                                            zeros(0, 4, device=dev)), zeros(2, 4)),
        ("gemm_ar N=0", lambda: ops.gemm_ar(zeros(3, 3, device=dev), zeros(3, 0, device=dev)),
         zeros(3, 0)),
        ("gemm_ar K=0", lambda: ops.gemm_ar(zeros(3, 0, device=dev), zeros(0, 2, device=dev)),
         zeros(3, 2)),
    )
    for what, call, ref in cases:
        _close(f"{what} (seed {seed})", call(), ref.double(), f32, gemm=True)
        checks += 1
    _check_unchanged(kept, seed)
    return checks


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_overlapped_gemms_equal_torch(world_size, backend):
    seed = _seed()
    got = ditron.launch(_gemms_case, world_size, seed, backend=backend)
    assert got == [25] * world_size, f"seed {seed}"


# -- bad input: a clear error before any kernel, the ranks in step afterwards ----------------
def _count_kernel_launches() -> list[str]:
    """The names of the Triton kernels this process launches from now on (interpreter)."""
    from triton.runtime.interpreter import InterpretedFunction

    names: list[str] = []
    run = InterpretedFunction.run

    def counted(self, *args, **kw):
        names.append(self.fn.__name__)
        return run(self, *args, **kw)

    InterpretedFunction.run = counted
    return names


def _bad_inputs_case(seed: int) -> list[str]:
    w = ditron.world()
    W, me, dev = w.world_size, w.rank, w.device
    counter = _count_kernel_launches() if w.backend == "cpu" else None
    ops = ditron.ops
    g = torch.Generator().manual_seed(seed + me)

    def t(*shape, dtype=torch.float32, device=None):
        return torch.randn(*shape, generator=g).to(dtype).to(device or dev)

    meta = "meta"
    mine = 2 + me  # a size that differs across ranks
    cases = [
        # all_gather
        ("all_gather dim out of range", ValueError, lambda: ops.all_gather(t(2, 3), 2)),
        ("all_gather on another device", ValueError, lambda: ops.all_gather(t(2, 3, device=meta))),
        ("all_gather 16-byte dtype", ValueError,
         lambda: ops.all_gather(torch.zeros(2, 3, dtype=torch.complex128, device=dev))),
        ("all_gather shapes differ", ValueError, lambda: ops.all_gather(t(mine, 3))),
        ("all_gather dtypes differ", ValueError,
         lambda: ops.all_gather(t(2, 3, dtype=torch.float16 if me else torch.float32))),
        ("all_gather out of a wrong shape", ValueError,
         lambda: ops.all_gather(t(2, 3), out=torch.empty(2 * W + 1, 3, device=dev))),
        # reduce_scatter
        ("reduce_scatter W does not divide", ValueError, lambda: ops.reduce_scatter(t(W + 1, 2))),
        ("reduce_scatter shapes differ", ValueError, lambda: ops.reduce_scatter(t(W, mine))),
        ("reduce_scatter on another device", ValueError,
         lambda: ops.reduce_scatter(t(W, 2, device=meta))),
        # all_reduce
        ("all_reduce unknown method", ValueError, lambda: ops.all_reduce(t(3), "three_shot")),
        ("all_reduce shapes differ", ValueError, lambda: ops.all_reduce(t(mine))),
        ("all_reduce unsummable dtype", ValueError,
         lambda: ops.all_reduce(torch.zeros(3, dtype=torch.bool, device=dev))),
        # all_to_all
        ("all_to_all splits do not sum to the rows", ValueError,
         lambda: ops.all_to_all(t(W + 1, 2), [1] * W, [1] * W)),
        ("all_to_all W + 1 splits", ValueError,
         lambda: ops.all_to_all(t(W, 2), [W] + [0] * W, [W] + [0] * W)),
        ("all_to_all negative split", ValueError,
         lambda: ops.all_to_all(t(W, 2), [2, -1] + [0] * (W - 2) if W > 1 else [-1])),
        ("all_to_all out_splits do not match", ValueError,
         lambda: ops.all_to_all(t(W, 2), [1] * W, [2] + [1] * (W - 2) + [0])),
        ("all_to_all rows do not divide", ValueError, lambda: ops.all_to_all(t(W + 1, 2))),
        # ag_gemm
        ("ag_gemm K mismatch", ValueError, lambda: ops.ag_gemm(t(2, 3), t(4, 2))),
        ("ag_gemm integer dtype", ValueError,
         lambda: ops.ag_gemm(torch.ones(2, 3, dtype=torch.int32, device=dev),
                             torch.ones(3, 2, dtype=torch.int32, device=dev))),
        ("ag_gemm a and b dtypes differ", ValueError,
         lambda: ops.ag_gemm(t(2, 3), t(3, 2, dtype=torch.bfloat16))),
        ("ag_gemm on another device", ValueError,
         lambda: ops.ag_gemm(t(2, 3, device=meta), t(3, 2, device=meta))),
        ("ag_gemm 1-D a", ValueError, lambda: ops.ag_gemm(t(3), t(3, 2))),
        ("ag_gemm shapes differ", ValueError, lambda: ops.ag_gemm(t(mine, 3), t(3, 2))),
        # gemm_rs / gemm_ar
        ("gemm_rs W does not divide M", ValueError, lambda: ops.gemm_rs(t(W + 1, 3), t(3, 2))),
        ("gemm_rs shapes differ", ValueError, lambda: ops.gemm_rs(t(W, 3), t(3, mine))),
        ("gemm_ar float64", ValueError,
         lambda: ops.gemm_ar(t(2, 3, dtype=torch.float64), t(3, 2, dtype=torch.float64))),
        ("gemm_ar shapes differ", ValueError, lambda: ops.gemm_ar(t(2, mine), t(mine, 2))),
        # symmetric tensors: a mismatch, the heap exhausted (DITRON_HEAP_SIZE is small), also
        # by an op's workspace
        ("empty shapes differ", ValueError, lambda: ditron.empty((mine,), torch.float32)),
        ("empty heap exhausted", RuntimeError, lambda: ditron.empty((1 << 20,), torch.float32)),
        ("all_gather heap exhausted", RuntimeError, lambda: ops.all_gather(t(256, 1024))),
        ("ag_gemm heap exhausted", RuntimeError, lambda: ops.ag_gemm(t(512, 512), t(512, 2))),
    ]
    problems = []
    for what, exc, call in cases:
        if W == 1 and ("differ" in what or "W does not divide" in what or "rows do not" in what
                       or "out_splits" in what):
            continue  # nothing to disagree on or to divide with one rank
        if W == 1 and "heap exhausted" in what and "empty" not in what:
            continue  # one rank: the ops need no workspace
        before = len(counter) if counter is not None else 0
        try:
            call()
        except exc:
            pass
        except Exception as e:  # noqa: BLE001 - reported by name
            problems.append(f"{what}: {type(e).__name__} instead of {exc.__name__}: {e}")
        else:
            problems.append(f"{what}: accepted")
        ran = counter[before:] if counter is not None else []
        if "heap exhausted" in what:
            # an op whose workspace does not fit frees the cached ones and tries again
            # (ops/workspaces.py): after a barrier, so no peer still uses them
            ran = [name for name in ran if name != "_barrier_kernel"]
        if ran:
            problems.append(f"{what}: Triton kernels {ran} ran before the error")
    # the ranks are in step: every op still works and equals torch
    launched = len(counter) if counter is not None else 0
    x = t(2 * W, 3)
    ref = _summed(x)
    _close("all_reduce after", ops.all_reduce(x), ref, torch.float32)
    _close("all_gather after", ops.all_gather(x), torch.cat(_gathered(x)), torch.float32,
           exact=True)
    _close("reduce_scatter after", ops.reduce_scatter(x), ref.chunk(W)[me], torch.float32)
    _close("all_to_all after", ops.all_to_all(x),
           torch.cat([p.chunk(W)[me] for p in _gathered(x)]), torch.float32, exact=True)
    a, b = t(3, 4), t(4, 5)
    _close("ag_gemm after", ops.ag_gemm(a, b), torch.cat(_gathered(a)) @ b.cpu().double(),
           torch.float32, gemm=True)
    aa, bb = t(2 * W, 4), t(4, 5)
    _close("gemm_rs after", ops.gemm_rs(aa, bb),
           _summed(aa.cpu().double() @ bb.cpu().double()).chunk(W)[me], torch.float32, gemm=True)
    _close("gemm_ar after", ops.gemm_ar(aa, bb), _summed(aa.cpu().double() @ bb.cpu().double()),
           torch.float32, gemm=True)
    if counter is not None and W > 1:
        assert len(counter) > launched, "the kernel counter saw no launch of the valid calls"
    return problems


@pytest.mark.parametrize("world_size", [1, 3])
def test_bad_input_raises_before_any_kernel(world_size, backend, monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "2M")
    seed = _seed()
    got = ditron.launch(_bad_inputs_case, world_size, seed, backend=backend)
    assert got == [[]] * world_size, f"seed {seed}: {got}"
