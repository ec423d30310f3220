"""The world of ranks: ``init``, ``world``, ``shutdown`` and the per-process runtime state."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import os
import uuid
from collections.abc import Iterator

import torch
import torch.distributed as dist

from ..language.context import DIAG_WORDS, DeviceContext
from ..language.core import HEAP_BASE_ALIGN
from . import host_rows, interpret
from .backends import Backend, Topology, get_backend, meet
from .config import Settings, check_backend
from .groups import Groups, group_ranks, nodes_of, world_groups
from .heap import SymmetricHeap


@dataclasses.dataclass(frozen=True)
class World:
    """Where this process stands among the ranks of the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str
    #: the torch.distributed (global) rank of each rank of this world, in order
    global_ranks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.global_ranks:
            object.__setattr__(self, "global_ranks", tuple(range(self.world_size)))

    @property
    def node(self) -> int:
        return self.rank // self.local_world_size

    @property
    def num_nodes(self) -> int:
        return -(-self.world_size // self.local_world_size)


class Runtime:
    """Everything one rank process holds between ``init`` and ``shutdown``."""

    def __init__(self, world: World, settings: Settings, backend: Backend, topo: Topology,
                 groups: Groups, heap: SymmetricHeap, owns_process_group: bool,
                 node_size: int):
        self.world = world
        self.settings = settings
        #: the job's ranks per node the world was made with (``init``'s ``local_world_size``;
        #: a world over a group spanning nodes has fewer: ``world.local_world_size``)
        self.node_size = node_size
        self.backend = backend
        self.topo = topo
        self.groups = groups
        self.host_group = groups.host
        self.heap = heap
        self.owns_process_group = owns_process_group
        misaligned = [b for b in heap.mapping.bases if b % HEAP_BASE_ALIGN]
        if misaligned:  # kernels are compiled assuming aligned bases (language.core)
            raise RuntimeError(f"ditron: symmetric heap bases {misaligned} are not "
                               f"{HEAP_BASE_ALIGN}-byte aligned")
        self.heap_bases = torch.tensor(heap.mapping.bases, dtype=torch.int64, device=world.device)
        self.diag = torch.zeros(DIAG_WORDS, dtype=torch.int64, device=world.device)
        self.wait_timeout = settings.wait_timeout
        #: whether a context with a wait budget was made: ``check_waits`` reads the record
        #: while one may have given up, also once the timeout is set back to 0
        self.timed = settings.wait_timeout > 0
        self.cache: dict = {}  # per-process workspaces keyed by their users (signal pads, ...)
        #: set by ``shutdown``: what holds this runtime past it (a compiled megakernel) refuses
        #: to run on its heap, whose peers and signals are no world's any more
        self.closed = False

    @property
    def wait_seconds(self) -> float:
        """The wait timeout the kernels get (0: none): ``wait_timeout``, less where it
        exceeds :data:`MAX_POLLS` polls (about 1070 s on CUDA)."""
        return min(self.wait_timeout, MAX_POLLS / self.backend.polls_per_second)

    def context(self) -> DeviceContext:
        limit = 0
        if self.wait_timeout > 0:
            limit = int(min(self.wait_timeout * self.backend.polls_per_second, MAX_POLLS))
            limit = max(limit, 1)
            self.timed = True
        return DeviceContext(self.heap_bases, self.world.rank, self.world.world_size,
                             self.diag, limit)


#: the most polls a wait makes before giving up (its counter is an int32 in the kernels)
MAX_POLLS = 2**31 - 1
_RUNTIME: Runtime | None = None  # the current world's
_RUNTIMES: dict[tuple[int, ...], Runtime] = {}  # every world of this process, by global ranks
_GROUPS_MADE = 0  # process groups ``init`` made in this process (see ``_rendezvous``)
#: in a process forked from one that held worlds: the parent's pid, its default process
#: group as of the fork (which the child inherited, connections and all, and must not use)
#: and its current world (which ``world()`` still reads: a forked data loader's rank)
_FORKED_FROM: tuple[int, object, World | None] | None = None


def _forget_worlds_after_fork() -> None:
    """In a forked child: the parent's worlds are not the child's (their process groups'
    connections and their heaps' peers are the parent's). None is current, those that
    things still hold are closed, and ``init`` refuses the inherited process group."""
    global _RUNTIME, _FORKED_FROM
    if not _RUNTIMES:
        return
    for rt in _RUNTIMES.values():
        rt.closed = True
    _FORKED_FROM = (os.getppid(), dist.group.WORLD if dist.is_initialized() else None,
                    _RUNTIME.world if _RUNTIME is not None else None)
    _RUNTIME = None
    _RUNTIMES.clear()


os.register_at_fork(after_in_child=_forget_worlds_after_fork)


def current() -> Runtime:
    if _RUNTIME is None:
        forked = ("" if _FORKED_FROM is None else
                  f" (it was forked from process {_FORKED_FROM[0]}, whose worlds a fork does "
                  f"not carry over)")
        raise RuntimeError(f"ditron is not initialised in this process{forked}: call "
                           f"ditron.init() (or start the ranks with ditron.launch)")
    return _RUNTIME


def is_initialized() -> bool:
    return _RUNTIME is not None


def world() -> World:
    """The current :class:`World` of this process (after ``ditron.init``). In a process
    forked from an initialised one (a data loader's worker), the parent's, to read: its
    collectives, symmetric tensors and ``init`` are refused there."""
    if _RUNTIME is None and _FORKED_FROM is not None and _FORKED_FROM[2] is not None:
        return _FORKED_FROM[2]
    return current().world


def world_over(ranks: tuple[int, ...]) -> World:
    """This process's world over the given global ranks (``ValueError`` if there is none)."""
    rt = _RUNTIMES.get(tuple(ranks))
    if rt is None:
        raise ValueError(f"ditron: no world over global ranks {list(ranks)} in this process "
                         f"(worlds: {[list(r) for r in _RUNTIMES]})")
    return rt.world


@contextlib.contextmanager
def use(w: World) -> Iterator[World]:
    """Make ``w`` (a world ``init`` returned in this process) the current one inside the
    ``with`` block: ops, symmetric allocations, barriers and ``ditron.context()`` there
    run in ``w``; the previous world is current again afterwards. If the block shut the
    previous world down, the world the block left current stays so (a world it made
    after ``ditron.shutdown()``, or none)."""
    global _RUNTIME
    rt = _RUNTIMES.get(w.global_ranks) if isinstance(w, World) else None
    if rt is None or rt.world != w:
        raise ValueError(f"ditron.use: {w!r} is not a world of this process (worlds: "
                         f"{[list(r) for r in _RUNTIMES]})")
    previous, _RUNTIME = _RUNTIME, rt
    try:
        yield w
    finally:  # unless the block shut it down: then what the block left current stays
        if any(previous is r for r in _RUNTIMES.values()):
            _RUNTIME = previous


def _check_same_settings(rt: Runtime, heap_size: int | str | None,
                         wait_timeout: float | None, local_world_size: int | None) -> None:
    """``init``'s keywords for a world that exists: checked, and equal to its settings
    (they are not applied to it)."""
    given = {"heap_size": heap_size, "wait_timeout": wait_timeout,
             "local_world_size": local_world_size}
    if all(v is None for v in given.values()):
        return
    asked = Settings.from_env(rt.world.backend, **given)
    have = {"heap_size": rt.settings.heap_size, "wait_timeout": rt.wait_timeout,
            "local_world_size": rt.node_size}
    differ = [f"{k}={getattr(asked, k)!r} (the world has {have[k]!r})"
              for k, v in given.items() if v is not None and getattr(asked, k) != have[k]]
    if differ:
        raise RuntimeError(f"ditron.init: this world exists and keeps its settings; asked for "
                           f"{', '.join(differ)} (ditron.shutdown() first to change them)")


def _env_int(name: str, default: int) -> int:
    """The launcher's integer variable ``name`` (``RANK``, ``WORLD_SIZE``...): ``default``
    when unset; ``ValueError`` naming it when it is not an integer."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"ditron.init: {name} must be an integer (as torchrun or "
                         f"ditron.launch set it), got {value!r}") from None


def host_backend(impl, node_size: int) -> str:
    """The ``torch.distributed`` backend of the host collectives: the device backend's own
    (NCCL), or gloo where ranks share a device, which NCCL refuses: ranks of a node on one
    device, or nodes simulated on one machine (``node_size`` below its processes,
    ``LOCAL_WORLD_SIZE``), whose nodes reuse the machine's devices."""
    simulated = node_size < _env_int("LOCAL_WORLD_SIZE", default=node_size)
    return "gloo" if simulated or impl.shares_devices(node_size) else impl.dist_backend


def init(backend: str | None = None, *, group=None, heap_size: int | str | None = None,
         wait_timeout: float | None = None, local_world_size: int | None = None) -> World:
    """Join the job and map the symmetric heap (collective over the world's ranks).

    Reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` as set by ``torchrun``
    or ``ditron.launch`` (a lone process is rank 0 of 1). Uses an existing default process
    group if there is one; otherwise creates it (gloo on CPU or when ranks share a GPU,
    NCCL otherwise). ``backend`` is ``"cpu"`` or ``"cuda"``, by default chosen by hardware.

    ``group`` makes the world a group of the job's ranks instead of all of them: a
    ``torch.distributed`` ``ProcessGroup`` (``DeviceMesh.get_group("tp")``, say) or a
    sequence of global ranks. Only its members call ``init``, all with the same group; the
    world's ranks are its members in increasing global rank, and every op, symmetric tensor
    and barrier spans them only (``World.global_ranks`` maps back).

    A process can hold several worlds (a TP group and an EP group, say), each with its own
    heap: ``init`` with a new group makes that world and makes it current; :func:`use`
    switches between them. Calling ``init`` again without a group (e.g. inside
    ``ditron.launch``) returns the current world; with the group of an existing world,
    that world (made current). Settings keywords given then must equal that world's (it
    keeps them; ``RuntimeError`` otherwise).

    Keyword arguments override the ``DITRON_*`` settings of :class:`Settings`
    (``local_world_size``: ranks per node of the job). The ranks of a new world must agree
    on its backend, heap size, wait timeout and ranks per node: ``ValueError`` on every
    rank otherwise. A rank whose part fails (a setting it cannot read, its device, mapping
    its heap: ``/dev/shm`` full, an mmap or CUDA error) raises its error, and every other
    rank raises ``RuntimeError`` naming it, instead of waiting for it; no world is made
    (nor kept: a process group ``init`` made is destroyed) and ``init`` may be called
    again. (Where ``init`` makes the process group, a rank that fails before it exists
    leaves its peers at the rendezvous until its timeout, or until the launcher ends
    them, as ``ditron.launch`` and ``torchrun`` do.)
    """
    global _RUNTIME
    backend = check_backend(backend) if backend else None
    if _RUNTIME is not None:
        if backend is not None and backend != _RUNTIME.world.backend:
            raise RuntimeError(f"ditron.init: already initialised with backend "
                               f"{_RUNTIME.world.backend!r}, not {backend!r} (call "
                               f"ditron.shutdown() first)")
        known = (_RUNTIME if group is None
                 else _RUNTIMES.get(group_ranks(group, dist.get_world_size())))
        if known is not None:
            _check_same_settings(known, heap_size, wait_timeout, local_world_size)
            _RUNTIME = known
            return known.world
        backend = _RUNTIME.world.backend
    if _FORKED_FROM is not None and dist.is_initialized() \
            and dist.group.WORLD is _FORKED_FROM[1]:
        raise RuntimeError(f"ditron.init: this process was forked from process "
                           f"{_FORKED_FROM[0]}, which had initialised ditron: the process "
                           f"group it inherited is the parent's (its connections too); start "
                           f"ranks with ditron.launch, torchrun or multiprocessing's spawn or "
                           f"forkserver methods")
    try:
        settings, impl, job_rank, job_size, node_size, device = _prepare(
            backend, group, heap_size, wait_timeout, local_world_size)
    except Exception as exc:
        if dist.is_initialized():  # the caller's group: the peers meet in _join, told there
            _refuse(group, exc)
        raise
    owns_pg = not dist.is_initialized()
    try:
        return _join(settings, impl, group, job_rank, job_size, node_size, device, owns_pg)
    except BaseException:
        if owns_pg and dist.is_initialized():  # else a retry finds it made, and unowned:
            dist.destroy_process_group()       # no shutdown would destroy it
        raise


def _prepare(backend: str | None, group, heap_size, wait_timeout, local_world_size
             ) -> tuple[Settings, Backend, int, int, int, torch.device]:
    """``init``'s steps that each rank takes alone: its settings, backend, global rank,
    job size, ranks per node and device (the process prepared for it)."""
    settings = Settings.from_env(backend, heap_size=heap_size, wait_timeout=wait_timeout,
                                 local_world_size=local_world_size)
    interpret.arrange(settings.backend)
    impl = get_backend(settings.backend)

    if dist.is_initialized():  # the caller's process group, however it was made
        job_rank, job_size = dist.get_rank(), dist.get_world_size()
    else:
        job_rank, job_size = _env_int("RANK", default=0), _env_int("WORLD_SIZE", default=1)
        if not 0 <= job_rank < job_size:  # torch.distributed would wait for rank 0 forever
            raise ValueError(f"ditron.init: RANK={job_rank} must be in [0, WORLD_SIZE="
                             f"{job_size}) (unset: a lone process, rank 0 of 1)")
    node_size = settings.local_world_size or _env_int("LOCAL_WORLD_SIZE", default=job_size)
    if not 1 <= node_size <= job_size:
        source = ("ditron.init(local_world_size=...) or DITRON_LOCAL_WORLD_SIZE"
                  if settings.local_world_size else "LOCAL_WORLD_SIZE")
        raise ValueError(f"ditron.init: local world size {node_size} ({source}) must be in "
                         f"[1, {job_size}] (the world's ranks)")
    if not isinstance(group, dist.ProcessGroup):  # a bad list fails before any group is made
        listed = group_ranks(group, job_size)
        if job_rank not in listed:
            raise ValueError(f"ditron.init: this process (global rank {job_rank}) is not in "
                             f"the group {list(listed)}; only its members call ditron.init")
        nodes_of(listed, node_size)
    device = impl.device(job_rank % node_size, node_size)
    impl.prepare_process(device, node_size)

    return settings, impl, job_rank, job_size, node_size, device


def _refuse(group, exc: Exception) -> None:
    """Take part, with this rank's error ``exc``, in the meeting of a new world's ranks
    that its peers hold in :func:`_join` (its groups, then the check of its settings), so
    that they raise naming this rank instead of waiting for it. Only in a process group
    that the caller made (one that ``init`` would make needs this rank's settings) and
    only where this rank is a member of the world's group."""
    try:
        ranks = group_ranks(group, dist.get_world_size())
    except ValueError:  # a bad group: no world for peers to wait in
        return
    if dist.get_rank() not in ranks or len(ranks) == 1:
        return
    # the world's groups, which the retry reuses (groups._KEPT), as the peers' do
    groups = world_groups(group)
    _check_new_world(groups.host, len(ranks), None, problem=f"{type(exc).__name__}: {exc}")


def _join(settings: Settings, impl: Backend, group, job_rank: int, job_size: int,
          node_size: int, device: torch.device, owns_pg: bool) -> World:
    """``init``'s collective part: the process group (``owns_pg``: made here), the world's
    groups and its heap; the new world made current."""
    global _RUNTIME
    if owns_pg:
        pg_backend = host_backend(impl, node_size)
        init_method = _rendezvous()
        if init_method == "env://" and job_size == 1:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
        kwargs = {"device_id": device} if pg_backend == "nccl" else {}
        dist.init_process_group(pg_backend, init_method=init_method, rank=job_rank,
                                world_size=job_size,
                                timeout=datetime.timedelta(seconds=_host_timeout(settings)),
                                **kwargs)
    lws = nodes_of(group_ranks(group, job_size), node_size)
    groups = world_groups(group)
    ranks = groups.ranks
    rank = ranks.index(job_rank)
    _check_new_world(groups.host, len(ranks), settings, lws)
    topo = Topology(rank, len(ranks), lws)

    job = os.environ.get("DITRON_JOB")
    if job is not None and not groups.whole_job:  # a world per group: segments must not collide
        job = f"{job}-g{hashlib.sha1(repr(ranks).encode()).hexdigest()[:10]}"
    job = [job or (uuid.uuid4().hex[:12] if rank == 0 else None)]
    dist.broadcast_object_list(job, group=groups.host, group_src=0)
    mapping = impl.map_heap(settings.heap_size, topo, groups, job[0])
    try:  # what fails on one rank from here fails on all, the heap released
        failure = rt = None
        try:
            heap = SymmetricHeap(mapping, rank, groups.host, poison=settings.poison)
            w = World(rank, topo.world_size, topo.local_rank, topo.local_world_size, device,
                      settings.backend, ranks)
            rt = Runtime(w, settings, impl, topo, groups, heap, owns_pg, node_size)
        except Exception as exc:  # noqa: BLE001 - told to the peers, raised on every rank
            failure = exc
        meet(groups.host, "ditron.init: making the world's runtime", failure)
    except BaseException:
        impl.unmap_heap(mapping)
        raise
    _RUNTIME = _RUNTIMES[ranks] = rt
    return w


def _rendezvous() -> str:
    """The init method of a process group ``init`` makes: ``DITRON_INIT_METHOD``
    (``env://`` unset). A ``file://`` store serves one process group (a second one on the
    same file can meet the first's keys, or lose its file to a peer's cleanup, and wait
    forever), so after ``shutdown`` the n-th group this process makes meets at
    ``<file>.<n>``: ranks that shut down and ``init`` again together count alike."""
    global _GROUPS_MADE
    method = os.environ.get("DITRON_INIT_METHOD", "env://")
    made, _GROUPS_MADE = _GROUPS_MADE, _GROUPS_MADE + 1
    return f"{method}.{made}" if made and method.startswith("file://") else method


def _check_new_world(host_group, world_size: int, settings: Settings | None,
                     lws: int | None = None, problem: str | None = None) -> None:
    """Raise on every rank of a new world whose ranks ask for different backends, heap
    sizes, wait timeouts or call checks, or count different ranks per node (``ValueError``:
    before any heap is mapped, where buffers placed from the top, the barrier's pad first,
    would get different offsets, a rank without a timeout would wait for ever for a peer
    whose wait gave up, or one checking every call for a peer that checks only new ones),
    or where a rank could not join it (``RuntimeError`` naming its error: ``problem``,
    given on that rank, which takes no settings then and raises nothing here)."""
    if world_size == 1:
        return
    what = "ditron.init"
    names = ("backend", "heap_size", "wait_timeout", "check_calls", "local_world_size")
    values = ((None,) * len(names) if settings is None else
              (settings.backend, settings.heap_size, settings.wait_timeout,
               settings.check_calls, lws))
    rows = host_rows.exchange(host_group, what, (*names, "problem"), (*values, problem),
                              host_rows.OK if problem is None else host_rows.REFUSED)
    if rows.calls is None or problem is not None:
        return
    if (calls := rows.different_calls()) is not None:
        raise RuntimeError(f"{what}: ranks are in different collective calls (some make a "
                           f"world, others do something else):\n{calls}")
    refused = [f"  rank {r}: {call[2][-1]}" for r, (kind, call)
               in enumerate(zip(rows.kinds, rows.calls, strict=True))
               if kind == host_rows.REFUSED]
    if refused:
        raise RuntimeError(f"{what}: {'a rank' if len(refused) == 1 else 'ranks'} of the "
                           f"new world could not join it (raised there too):\n"
                           + "\n".join(refused))
    from .agreement import disagreement  # agreement -> world

    raise ValueError(disagreement(what, names, [c[2][:-1] for c in rows.calls]) +
                     "\n(every rank of a world needs the same backend, DITRON_HEAP_SIZE, "
                     "DITRON_WAIT_TIMEOUT and DITRON_CHECK_CALLS or init's keywords, and the "
                     "same ranks per node)")


def shutdown() -> None:
    """Release every world of this process, newest first (each a collective over its
    ranks), and, if ``init`` created it, the process group (idempotent)."""
    global _RUNTIME
    runtimes = list(_RUNTIMES.values())[::-1]
    _RUNTIME = None
    _RUNTIMES.clear()
    for rt in runtimes:
        rt.closed = True
    errors = []
    for rt in runtimes:
        try:
            _release(rt)
        except BaseException as exc:  # noqa: BLE001 - release the others, then raise
            errors.append(exc)
    if dist.is_initialized() and any(rt.owns_process_group for rt in runtimes):
        dist.destroy_process_group()
    if errors:
        raise errors[0]


def _release(rt: Runtime) -> None:
    """Synchronise the device, meet the world's ranks and release the heap and groups. A
    rank whose synchronisation fails (a device error of an earlier kernel) still meets its
    peers, with its error: it raises it, and they raise naming it, instead of waiting."""
    try:
        failure = None
        try:
            rt.backend.synchronize(rt.world.device)
        except Exception as exc:  # noqa: BLE001 - told to the peers, then raised
            failure = exc
        if rt.world.world_size > 1:  # a barrier on the host rows: a peer still in a host
            # check (an allocation, an agreement) raises with this rank instead of hanging
            problem = None if failure is None else f"{type(failure).__name__}: {failure}"
            rows = host_rows.exchange(rt.host_group, "ditron.shutdown", ("problem",),
                                      (problem,),
                                      host_rows.OK if failure is None else host_rows.PROBLEM)
            if (calls := rows.different_calls()) is not None:
                raise RuntimeError(f"ditron.shutdown: ranks are in different collective "
                                   f"calls (some shut down, others did not):\n{calls}")
            failed = [f"  rank {r}: {call[2][0]}" for r, (kind, call)
                      in enumerate(zip(rows.kinds, rows.calls or (), strict=False))
                      if kind == host_rows.PROBLEM]
            if failed and failure is None:
                raise RuntimeError("ditron.shutdown: another rank's device failed (its "
                                   "synchronisation raised):\n"
                                   + "\n".join(failed))
        if failure is not None:
            raise failure
    finally:
        rt.backend.unmap_heap(rt.heap.mapping)  # its groups stay for the next world


def _host_timeout(settings: Settings) -> float:
    """Host collectives give up too when device waits have a timeout (never below 10 min)."""
    return max(settings.wait_timeout, 600.0) if settings.wait_timeout > 0 else 1800.0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
