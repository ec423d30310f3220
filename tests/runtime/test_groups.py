"""Ditron worlds over groups of the job's ranks (``ditron.init(group=...)``,
``ditron.launch(groups=...)``): every op spans its group only, against torch.distributed on
a group of the same ranks made independently (every job rank makes every group); groups
that allocate differently do not disturb each other; simulated nodes inside a group; a
DeviceMesh's TP group as the world of a TP x DP step; bad groups refused before any
collective.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
import torch.distributed as dist

import ditron
from ditron.runtime.groups import group_ranks, nodes_of

from ..ops.poison import poison_empty


def _reference_groups(parts: list[list[int]]):
    """This rank's group of ``parts``, made by plain torch.distributed on every job rank."""
    made = [dist.new_group(p, backend="gloo") for p in parts]
    return next(g for p, g in zip(parts, made, strict=True) if dist.get_rank() in p)


def _gathered(x: torch.Tensor, group) -> list[torch.Tensor]:
    parts = [torch.empty_like(x.cpu()) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x.cpu(), group=group)
    return parts


def _summed(x: torch.Tensor, op=dist.ReduceOp.SUM, group=None) -> torch.Tensor:
    y = x.cpu().clone()
    dist.all_reduce(y, op, group=group)
    return y


def _close(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4, msg=what)


def _same(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    """Bit for bit: ops that only move bytes, and max."""
    assert torch.equal(got.cpu(), ref), f"{what}: not bit-exact"


def _ops_in_group(parts: list[list[int]], calls: int) -> dict:
    """Every op of the world (this rank's group) against torch on the same group."""
    poison_empty()
    w = ditron.world()
    me = dist.get_rank()
    ref = _reference_groups(parts)
    mine = next(p for p in parts if me in p)
    assert w.global_ranks == tuple(sorted(mine)) and w.world_size == len(mine)
    assert w.rank == sorted(mine).index(me)
    W, dev = w.world_size, w.device
    # the groups allocate differently: offsets and heaps must stay per world
    extra = ditron.empty((w.global_ranks[0] + 1) * 64, torch.uint8)
    sym = ditron.zeros((3, 5), torch.float32)
    g = torch.Generator().manual_seed(1000 + me)
    for call in range(calls):
        x = torch.randn(7, 5, generator=g).to(dev)  # 7 rows: not a multiple of any tile
        out = torch.empty(7 * W, 5, device=dev)
        ditron.ops.all_gather(x, out=out)
        _same(out, torch.cat(_gathered(x, ref)), f"all_gather, call {call}")

        y = torch.randn(3 * W, 6, generator=g).to(dev)
        _close(ditron.ops.reduce_scatter(y), _summed(y, group=ref)[3 * w.rank: 3 * w.rank + 3],
               f"reduce_scatter, call {call}")
        _same(ditron.ops.all_reduce(y, op="max"), _summed(y, dist.ReduceOp.MAX, ref),
              f"all_reduce max, call {call}")

        sizes = [(w.rank + j + call) % 3 for j in range(W)]  # uneven, some 0
        every = [torch.empty(W, dtype=torch.int64) for _ in range(W)]
        dist.all_gather(every, torch.tensor(sizes), group=ref)
        recv = [int(every[j][w.rank]) for j in range(W)]
        z = torch.randn(sum(sizes), 4, generator=g).to(dev)
        expected = torch.empty(sum(recv), 4)
        dist.all_to_all_single(expected, z.cpu(), recv, sizes, group=ref)
        _same(ditron.ops.all_to_all(z, sizes, recv), expected, f"all_to_all, call {call}")

        a = torch.randn(9, 24, generator=g).to(dev)
        b = torch.randn(20, 24, generator=g).to(dev).t()  # a transposed weight
        c, ga = ditron.ops.ag_gemm(a, b, return_gathered=True, method="overlap")
        full = torch.cat(_gathered(a, ref))
        _same(ga, full, f"ag_gemm gathered, call {call}")
        _close(c, full @ b.cpu(), f"ag_gemm, call {call}")
        a2 = torch.randn(5 * W, 12, generator=g).to(dev)
        part = a2 @ b[:12]
        _close(ditron.ops.gemm_rs(a2, b[:12], method="overlap"),
               _summed(part, group=ref)[5 * w.rank: 5 * w.rank + 5], f"gemm_rs, call {call}")
        _close(ditron.ops.gemm_ar(a2, b[:12], method="overlap"), _summed(part, group=ref),
               f"gemm_ar, call {call}")
        # the plain paths (cuBLAS + the world's torch.distributed group)
        _close(ditron.ops.ag_gemm(a, b, method="fallback"), full @ b.cpu(),
               f"ag_gemm fallback, call {call}")
        _close(ditron.ops.gemm_rs(a2, b[:12], method="fallback"),
               _summed(part, group=ref)[5 * w.rank: 5 * w.rank + 5],
               f"gemm_rs fallback, call {call}")
        _close(ditron.ops.gemm_ar(a2, b[:12], method="fallback"), _summed(part, group=ref),
               f"gemm_ar fallback, call {call}")

        if W > 1:  # a ring, world ranks naming peers
            nxt, prv = (w.rank + 1) % W, (w.rank - 1) % W
            if w.rank % 2 == 0:
                ditron.ops.send(x, nxt)
                got = ditron.ops.recv(x.shape, prv)
            else:
                got = ditron.ops.recv(x.shape, prv)
                ditron.ops.send(x, nxt)
            _same(got, _gathered(x, ref)[prv], f"send/recv, call {call}")

        sym.fill_(float(me + call))
        ditron.barrier()
        node = [r for r in range(W) if r // w.local_world_size == w.node]  # mapped heaps
        seen = [float(ditron.peer(sym, r)[0, 0]) for r in node]
        assert seen == [float(w.global_ranks[r] + call) for r in node], (seen, call)
        ditron.barrier()
    del extra
    return {"rank": w.rank, "ranks": w.global_ranks}


@pytest.mark.parametrize("parts", [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 1, 3], [2]]],
                         ids=["blocks", "strided", "three-and-one"])
def test_ops_span_their_group(backend, parts):
    got = ditron.launch(_ops_in_group, 4, parts, 2, backend=backend, groups=parts)
    for g, row in enumerate(got):
        mine = sorted(next(p for p in parts if g in p))
        assert row == {"rank": mine.index(g), "ranks": tuple(mine)}


@pytest.mark.parametrize(("node_size", "parts"), [(1, [[0, 1], [2, 3]]), (2, [[0, 2], [1, 3]]),
                                                  (2, [[0, 1, 2, 3]])],
                         ids=["rank-per-node", "group-across-nodes", "two-nodes-of-two"])
def test_groups_on_simulated_nodes(monkeypatch, parts, node_size):
    """Groups whose ranks lie on different (simulated) nodes: the network path, its
    per-local-index groups and its headers name peers by world rank."""
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", str(node_size))
    got = ditron.launch(_ops_in_group, 4, parts, 1, backend="cpu", groups=parts)
    assert [row["ranks"] for row in got] == [tuple(next(p for p in parts if g in p))
                                             for g in range(4)]


def _tp_dp_step(rendezvous: str) -> list[float]:
    """A TP x DP step on a 2 x 2 DeviceMesh: the Ditron world is the mesh's TP group
    (given as a ProcessGroup), the gradients' DP all-reduce is plain torch.distributed."""
    from torch.distributed.device_mesh import init_device_mesh

    rank, size = dist.get_rank(), dist.get_world_size()
    ditron.shutdown()  # launch made a world of the whole job (and its process group)
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=size)
    try:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tp, dp = mesh.get_group("tp"), mesh.get_group("dp")
        other = [r for r in range(size) if r not in dist.get_process_group_ranks(tp)]
        with pytest.raises(ValueError, match="is not in the group"):
            ditron.init("cpu", group=other)
        w = ditron.init("cpu", group=tp)
        assert w.global_ranks == tuple(dist.get_process_group_ranks(tp))
        with pytest.raises(ValueError, match="is not in the group"):
            ditron.init(group=other)
        assert ditron.init(group=tp) == w == ditron.world()
        g = torch.Generator().manual_seed(7 + rank)
        x = torch.randn(6, 16, generator=g)  # this rank's sequence shard
        # this TP rank's column shard of an nn.Linear weight, the same in every DP replica
        weight = torch.randn(10, 16, generator=torch.Generator().manual_seed(w.rank))
        h = ditron.ops.ag_gemm(x, weight.t(), method="overlap")
        shards = [torch.empty_like(x) for _ in range(w.world_size)]
        dist.all_gather(shards, x, group=tp)
        _close(h, torch.cat(shards) @ weight.t(), "TP ag_gemm")
        grad = h.sum(0)
        dist.all_reduce(grad, group=dp)  # DP: plain torch over the mesh's other dimension
        replicas = [torch.empty_like(h) for _ in range(2)]
        dist.all_gather(replicas, h, group=dp)
        _close(grad, sum(r.sum(0) for r in replicas), "DP all-reduce")
        ditron.barrier()
        return grad.tolist()
    finally:
        ditron.shutdown()
        dist.destroy_process_group()


def test_device_mesh_tp_group_as_world(tmp_path):
    got = ditron.launch(_tp_dp_step, 4, f"file://{tmp_path / 'mesh'}", backend="cpu")
    # mesh [[0, 1], [2, 3]]: DP replicas {0, 2} and {1, 3} agree, TP ranks differ
    assert got[0] == got[2] and got[1] == got[3] and got[0] != got[1] and len(got[0]) == 10


def _global_ranks() -> tuple[int, ...]:
    return ditron.world().global_ranks


def test_bad_groups_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="distinct global ranks"):
        group_ranks([0, 0], 4)
    with pytest.raises(ValueError, match="distinct global ranks"):
        group_ranks([1, 4], 4)
    with pytest.raises(ValueError, match="ProcessGroup or a sequence"):
        group_ranks("01", 4)
    assert group_ranks([3, 1], 4) == (1, 3) and group_ranks(None, 3) == (0, 1, 2)
    assert nodes_of([4, 5, 6, 7], 4) == 4 and nodes_of([0, 4], 4) == 1
    assert nodes_of(range(6), 4) == 4 and nodes_of([0, 1, 4], 4) == 2  # last node shorter
    for ranks, node_size in (([0, 2, 1], 2), ([3, 4, 5, 6, 7], 4), ([0, 4, 5], 4)):
        with pytest.raises(ValueError, match="equal blocks of consecutive ranks"):
            nodes_of(ranks, node_size)
    with pytest.raises(ValueError, match="split range"):
        ditron.launch(_ops_in_group, 4, [[0, 1]], 1, backend="cpu", groups=[[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="split range"):
        ditron.launch(_ops_in_group, 3, [[0, 1]], 1, backend="cpu", groups=[[0, 1], []])
    with pytest.raises(ValueError, match="split range"):
        ditron.launch(_ops_in_group, 2, [[0, 1]], 1, backend="cpu", groups=[[0, "1"]])
    monkeypatch.setenv("DITRON_LOCAL_WORLD_SIZE", "2")  # nodes {0, 1} and {2, 3}
    assert ditron.launch(_global_ranks, 4, backend="cpu", groups=[[0, 1], [2, 3]]) == [
        (0, 1), (0, 1), (2, 3), (2, 3)]
    with pytest.raises(ValueError, match="equal blocks of consecutive ranks"):
        ditron.launch(_global_ranks, 4, backend="cpu", groups=[[0, 2, 3], [1]])


def _init_outside_the_group() -> bool:
    """A group that leaves this process out: torch.distributed's non-member marker for a
    ``ProcessGroup``, and a list, refused before any process group is made."""
    rank = dist.get_rank()
    outside = dist.new_group([0])  # every job rank calls new_group; rank 1 is no member
    if rank == 1:
        with pytest.raises(ValueError, match=r"this process is not a member of the group "
                                             r"\(torch.distributed.new_group gave it "
                                             r"GroupMember.NON_GROUP_MEMBER\)"):
            ditron.init(group=outside)
    ditron.shutdown()  # destroys the launch's process group
    with pytest.raises(ValueError, match=rf"this process \(global rank {rank}\) is not in "
                                         rf"the group \[{1 - rank}\]; only its members"):
        ditron.init(group=[1 - rank])
    return dist.is_initialized()


def test_init_outside_its_group_is_refused():
    """A non-member's ``ProcessGroup`` (``-100``) used to be refused as "not a
    ProcessGroup or a sequence"; a list leaving the process out was refused only after
    ``init`` had made the job's process group, which then stayed."""
    assert ditron.launch(_init_outside_the_group, 2, backend="cpu") == [False, False]


def test_megakernel_and_nn_layers_in_groups(backend):
    """The task level (a two-layer TP MLP megakernel) and ``ditron.nn``'s parallel layers
    (forward and backward) in worlds over strided and uneven groups."""
    from ditron.task.tp_mlp import MlpBlocks

    from ..nn.test_linear import GPU_SPECS, SPECS
    from ..nn.test_linear import _mlp_case as nn_case
    from ..task.test_megakernel import _mlp_case as megakernel_case

    blocks = MlpBlocks(block_m=16, block_n=32, block_k=32, reduce_n=64)
    got = ditron.launch(megakernel_case, 4, 20, 72, 40, 2, torch.float32, 2, blocks,
                        backend=backend, groups=[[0, 2], [1, 3]])
    assert got == [2] * 4
    specs = (SPECS if backend == "cpu" else GPU_SPECS)[:2]
    got = ditron.launch(nn_case, 4, 7, 20, 6, specs, backend=backend,
                        groups=[[0, 1, 3], [2]])
    assert got == [6 * sum(s[-1] for s in specs)] * 4


def _several_worlds(calls: int) -> int:
    """Three worlds in each process: the job (from launch), pairs {0, 1} / {2, 3} ("tp")
    and strided pairs {0, 2} / {1, 3} ("ep"), used in turns, each op against
    torch.distributed on the same ranks; a symmetric tensor of one world is refused in
    another."""
    poison_empty()
    job = ditron.world()
    me = dist.get_rank()
    tp_ref = _reference_groups([[0, 1], [2, 3]])
    ep_ref = _reference_groups([[0, 2], [1, 3]])
    tp = ditron.init(group=[me - me % 2, me - me % 2 + 1])
    assert ditron.world() == tp
    ep = ditron.init(group=[me % 2, me % 2 + 2])
    assert ditron.world() == ep and tp.global_ranks != ep.global_ranks
    assert ditron.init(group=tp.global_ranks) == tp == ditron.world()
    with ditron.use(ep):
        sym_ep = ditron.zeros(8)
    sym_tp = ditron.zeros(8)
    g = torch.Generator().manual_seed(50 + me)
    checks = 0
    for call in range(calls):
        a = torch.randn(5, 12, generator=g).to(job.device)
        b = torch.randn(12, 6, generator=g).to(job.device)
        with ditron.use(tp):
            _close(ditron.ops.ag_gemm(a, b, method="overlap"),
                   torch.cat(_gathered(a, tp_ref)) @ b.cpu(), f"tp ag_gemm, call {call}")
            with ditron.use(ep):  # nested: back to tp on exit
                x = torch.randn(4, 3, generator=g).to(job.device)
                ref = torch.empty(4, 3)
                dist.all_to_all_single(ref, x.cpu(), group=ep_ref)
                _same(ditron.ops.all_to_all(x), ref, f"ep all_to_all, call {call}")
            assert ditron.world() == tp
            _close(ditron.ops.all_reduce(b), _summed(b, group=tp_ref), f"tp all_reduce {call}")
        with ditron.use(job):
            _close(ditron.ops.all_reduce(b), _summed(b), f"job all_reduce, call {call}")
        checks += 4
    with ditron.use(tp):
        sym_tp.fill_(me)
        ditron.barrier()
        assert float(ditron.peer(sym_tp, 1 - tp.rank)[0]) == tp.global_ranks[1 - tp.rank]
        with pytest.raises(ValueError, match=r"not in the symmetric heap \(of the current world\)"):
            ditron.peer(sym_ep, 0)
    with pytest.raises(ValueError, match="not a world of this process"):
        with ditron.use(dataclasses.replace(tp, rank=5)):
            pass
    layer = ditron.nn.ColumnParallelLinear(12, 8, device=job.device)  # built in tp
    assert layer.world == tp and layer.weight.shape == (4, 12)
    with ditron.use(ep):  # it runs in its own world, whichever is current
        assert layer(torch.randn(5, 12, device=job.device)).shape == (10, 4)
        assert ditron.world() == ep
    # a TP MLP's backward runs in its forward's world, eager and compiled, whatever world
    # is current when autograd runs it
    row = ditron.nn.RowParallelLinear(8, 12, device=job.device)
    x = torch.randn(3, 12, generator=g).to(job.device).requires_grad_()
    params = [x, *layer.parameters(), *row.parameters()]

    def loss(x):
        return row(torch.nn.functional.gelu(layer(x))).square().sum()

    grads = []
    for run, other in [(loss, None), (loss, ep), (torch.compile(loss, backend="aot_eager",
                                                                fullgraph=True), ep)]:
        out = run(x)
        with ditron.use(other) if other is not None else contextlib.nullcontext():
            out.backward()
        grads.append([p.grad.clone() for p in params])
        for p in params:
            p.grad = None
    for i in (1, 2):
        for got, ref in zip(grads[i], grads[0], strict=True):
            _close(got, ref.cpu(), f"backward run {i} with the EP world current")
    with ditron.use(ep):
        ditron.shutdown()  # every world, newest first, and the job's process group
    assert not ditron.is_initialized() and not dist.is_initialized()
    return checks


def test_several_worlds_in_a_process(backend):
    assert ditron.launch(_several_worlds, 4, 2, backend=backend) == [8] * 4
