"""The megakernel: a task graph run as one persistent launch per call, on every rank.

``P`` programs share a queue (an int64 ticket counter): each takes the next ticket, waits
for the scoreboard slots of that item (acquire, system scope), runs the item's tile, then
sets its slot on each rank that waits for it (release: at GPU scope on its own rank, whose
waiters are programs of this kernel, at system scope on the others), until the queue is
empty. Slots follow the signal-pad protocol (``runtime/signals.py``): call ``e`` (from 1)
waits for and sets the value ``e``, so nothing is ever reset. The ticket counter is not reset
either: each call takes exactly ``n_items + P`` tickets (one failing ticket per program), so
call ``e`` starts at ``(e - 1) * (n_items + P)`` and a program's first ticket tells it the
call's epoch. The kernel's arguments are therefore the same at every call: it is launched
without per-call host work beyond the launch itself, and can be captured in a CUDA graph.

Calls are collective when the graph reaches other ranks, and run on the tensors the tasks
were given: write new inputs into them between calls. When a call returns (stream order on
CUDA), no rank touches this rank's memory for that call any more.

Progress: a program takes a ticket only once it runs, and waits only for items of lower
queue position (on any rank), so the lowest item in flight can always finish; programs that
do not fit on the GPU yet simply start later. So ``P`` may exceed what fits, except when
ranks share a GPU: a rank whose programs all wait for another rank's next item while that
rank has no program on the GPU would never finish. CUDA: ``P`` defaults to
``PROGRAMS_PER_SM`` per SM, and to the SMs divided among the ranks when ranks share a GPU
(one program per SM in all, which always fits). CPU backend: the interpreter runs program 0
to the end before program 1 starts; program 0 then takes every ticket in queue order, which
is a valid order, so any ``P`` works (default 1).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import re
import weakref

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from .. import trace as tracing
from ..runtime.agreement import agree, gather, refused_together
from ..runtime.barrier import barrier
from ..runtime.cuda_graphs import capturing
from ..runtime.diagnostics import WaitTimeoutError, check_waits
from ..runtime.integers import check_int
from ..runtime.signals import SignalPad
from ..runtime.symmetric import heap_rank, is_symmetric
from ..runtime.triton_launch import FastKernel
from ..runtime.world import current, use
from . import codegen
from .graph import (
    CTX,
    Schedule,
    Task,
    TaskGraph,
    check_warps,
    derive,
    describe_item,
    describe_slot,
    flatten,
)

#: default programs per SM on a GPU of its own: programs that do not fit wait for an SM and
#: take no ticket until they run, so more than fit is safe (module docstring)
PROGRAMS_PER_SM = 4


def _default_programs(device: torch.device, local_world_size: int) -> int:
    if device.type != "cuda":
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    share = -(-local_world_size // max(torch.cuda.device_count(), 1))
    if share > 1:  # every rank's programs must be resident at once: one per SM in all
        return max(1, sms // share)
    return PROGRAMS_PER_SM * sms


@functools.cache
def launch_option_names() -> frozenset[str]:
    """The keywords Triton's backends (CUDA, AMD) take as launch options (``num_stages``,
    ``maxnreg``...); empty when neither can be imported."""
    names: set[str] = set()
    for module, cls in (("triton.backends.nvidia.compiler", "CUDAOptions"),
                        ("triton.backends.amd.compiler", "HIPOptions")):
        try:
            names.update(f.name for f in dataclasses.fields(
                getattr(importlib.import_module(module), cls)))
        except (ImportError, AttributeError, TypeError):
            continue
    return frozenset(names)


def _kind(arg) -> str:
    """What every rank must pass for ``arg``: its type, a tensor's dtype (a pointer's type
    decides what a tile compiles to: a rank given another dtype failed at its first call,
    leaving its peers waiting for its tiles), a tuple's kinds element by element."""
    # an operand is a tensor however it is loaded: a rank whose operand is not aligned for
    # TMA passes the tensor where the others pass its descriptor, and builds its own kernel
    if isinstance(arg, TensorDescriptor):
        arg = arg.base
    if isinstance(arg, torch.Tensor):
        return f"tensor of {arg.dtype}"
    if isinstance(arg, tuple):
        return f"tuple({', '.join(map(_kind, arg))})"
    return type(arg).__name__


def _fingerprint(graph: TaskGraph) -> dict:
    """What every rank's graph must share, by field (argument values may differ, and so may
    how a rank loads an operand: through a pointer or a TMA descriptor; not its dtype)."""
    tasks = graph.tasks
    return {"tasks": tuple(t.name for t in tasks),
            "functions": tuple(f"{t.fn.fn.__module__}.{t.fn.fn.__qualname__}" for t in tasks),
            "tiles": tuple(t.tiles for t in tasks), "warps": tuple(t.warps for t in tasks),
            "argument_kinds": tuple(tuple(map(_kind, t.args)) for t in tasks)}


def _describe(tasks, rank: int, item: int, end: str) -> str:
    """Item ``item`` of ``rank`` in words (``-1``: the ``end`` of its call)."""
    if item < 0:
        return f"the {end} of rank {rank}'s call"
    return describe_item(tasks, rank, item) or f"item {item} on rank {rank}"


def _pair_links(links: frozenset, rank: int, world_size: int) -> dict[int, list]:
    """``links`` by the other rank of each (sorted)."""
    by_peer: dict[int, list] = {q: [] for q in range(world_size) if q != rank}
    for link in links:
        by_peer[link[2] if link[0] == rank else link[0]].append(link)
    return {q: sorted(got) for q, got in by_peer.items()}


def _agree_on_schedules(what: str, graph: TaskGraph, schedule: Schedule) -> None:
    """Raise on every rank when two ranks' schedules imply different signals between them
    (``Schedule.links``): one would wait for a signal the other never sets, or run before
    the data it reads. One host all-gather of a digest per pair of ranks (and one of the
    links themselves when two differ); a rank that could not derive its schedule joins the
    first with its error instead (``refused_together`` of ``what``)."""
    rt = current()
    W, me = rt.world.world_size, rt.world.rank
    pairs = _pair_links(schedule.links, me, W)
    digests = {q: hashlib.sha256(repr(links).encode()).hexdigest() for q, links in pairs.items()}
    every = [d for (d,) in gather(what, digests=digests)]
    differ = [(p, q) for p in range(W) for q in range(p + 1, W)
              if every[p][q] != every[q][p]]
    if not differ:
        return
    p, q = differ[0]
    # every rank takes part: each knows the digests differ
    mine = [links for (links,) in gather(
        what, links=pairs.get(q if me == p else p, []) if me in (p, q) else None)]
    ours, theirs = set(mine[p]), set(mine[q])

    def words(links: set) -> str:
        shown = [f"{_describe(graph.tasks, a, i, 'start')} -> "
                 f"{_describe(graph.tasks, b, j, 'end')}" for a, i, b, j in sorted(links)[:3]]
        more = f" and {len(links) - 3} more" if len(links) > 3 else ""
        return "; ".join(shown) + more

    lines = [f"  only rank {r} derives: {words(extra)}"
             for r, extra in ((p, ours - theirs), (q, theirs - ours)) if extra]
    raise ValueError(
        f"{what}: ranks {p} and {q} derive different dependencies between them "
        f"(reads / writes give other regions for the same (tile, rank) on different "
        f"ranks: compute them from their tile and rank arguments and from tensors of the "
        f"same shape on every rank, not from the rank running the code):\n"
        + "\n".join(lines))


class Megakernel:
    """A compiled :class:`TaskGraph`; call it to run the graph once (see module docstring).

    Attributes: ``tasks`` (the graph's tasks when it was compiled: tasks added to the
    graph later are not in this kernel), ``schedule`` (this rank's :class:`Schedule`),
    ``programs`` (``P``), ``launch_options`` (``num_warps``... given to Triton),
    ``traced`` (whether each call records its items for ``ditron.trace``)."""

    @torch.inference_mode(False)  # state kept across calls (runtime/heap.py)
    def __init__(self, graph: TaskGraph, schedule: Schedule, programs: int,
                 launch_options: dict, traced: bool = False, outline: bool = True) -> None:
        rt = current()
        self.graph = graph
        self.tasks: tuple[Task, ...] = tuple(graph.tasks)
        self.schedule = schedule
        self.programs = programs
        self.launch_options = launch_options
        self.traced = traced
        #: the last traced call's rows, one per queue position: item, program, start, waits
        #: done, tile done, end (device ns, or a logical clock on the CPU backend)
        self.last_trace: list[list[int]] = []
        device = rt.world.device
        s = schedule
        tables = [s.order, s.item_task, s.item_tile, s.dep_ptr, s.dep_slot, s.ntf_ptr,
                  s.ntf_rank, s.begin_ranks, s.tail_slots]
        flat = torch.tensor([v for t in tables for v in t] or [0], dtype=torch.int32, device="cpu")
        self._tables = flat.to(device)
        views, at = [], 0
        for t in tables:  # an empty table is still a valid (never read) pointer
            views.append(self._tables[at:at + max(len(t), 1)] if t else self._tables)
            at += len(t)
        (self._order, self._item_task, self._item_tile, self._dep_ptr, self._dep_slot,
         self._ntf_ptr, self._ntf_rank, self._begin, self._tail) = views
        self._pad = SignalPad.allocate(s.slots, name=f"megakernel:{graph.name}")
        #: the world it was compiled in: its calls run there (its heap, scoreboard and wait
        #: diagnostics), and are refused once ``ditron.shutdown`` has released it
        self._rt = rt
        self._queue = torch.zeros(1, dtype=torch.int64, device=device)
        # word 0: the CPU backend's logical clock; then one row per queue position
        self._trace = torch.zeros(1 + s.n_items * codegen.TRACE_FIELDS if traced else 1,
                                  dtype=torch.int64, device=device)
        self._calls = 0
        #: why a call raised from its launch (an interrupt, an error in a tile on the CPU
        #: backend): its programs may have taken part of that call's tickets, so that the
        #: next call would take up the rest under the same epoch; later calls are refused
        self._failed: str | None = None
        args, constexprs = [], dict(launch_options)
        constexprs.update(TRACE=traced, ON_GPU=device.type == "cuda")
        for k, task in enumerate(self.tasks):
            for name, const, value in zip(task.params, task.constexprs, task.args,
                                          strict=True):
                if value is CTX:
                    continue
                if const:
                    constexprs[codegen.param_name(k, name)] = value
                else:
                    args.append(value)
        fixed = (self._queue, self._order, self._item_task, self._item_tile, self._dep_ptr,
                 self._dep_slot, self._ntf_ptr, self._ntf_rank, self._begin,
                 len(s.begin_ranks), self._tail, len(s.tail_slots), self._pad.signals,
                 s.n_items, self._trace, rt.context())
        module, release = codegen.hold(self.tasks, outline)
        #: lets go of the generated module (``free``, or this object's collection)
        self._release = weakref.finalize(self, release)
        self._release.atexit = False  # nothing to let go of once the process ends
        kernel = FastKernel(module.megakernel)
        self._launch = kernel.bind((programs,), (*fixed, *args), constexprs)

    @property
    def calls(self) -> int:
        """How many times this megakernel has been called from the host (replays of a CUDA
        graph that captured it are not counted)."""
        return self._calls

    @torch.compiler.disable  # in torch.compile'd code: a graph break, run eagerly
    def __call__(self) -> None:
        """Run every task's tiles once (collective when the graph reaches other ranks).

        May be captured in a CUDA graph once it has run eagerly (the first call compiles);
        each replay is a call. Timeout mode checks the waits after eager calls only."""
        rt = self._rt
        if self._pad is None:
            raise RuntimeError(f"ditron.task: the megakernel of graph {self.graph.name!r} "
                               f"was freed")
        if rt.closed:
            raise RuntimeError(f"ditron.task: the megakernel of graph {self.graph.name!r} "
                               f"was compiled in a world that has been shut down "
                               f"(ditron.shutdown): its scoreboard and the heaps it reaches "
                               f"are that world's; build and compile the graph again in the "
                               f"current world (its symmetric tensors too, on every rank)")
        if self._failed is not None:
            raise RuntimeError(f"ditron.task: a call of the megakernel of graph "
                               f"{self.graph.name!r} failed ({self._failed}) part way, which "
                               f"leaves its queue and scoreboard inside that call: compile "
                               f"the graph again (on every rank its calls reach)")
        in_capture = capturing()
        if in_capture and self._calls == 0:
            raise RuntimeError("ditron.task: run the megakernel once before capturing it in "
                               "a CUDA graph (its first call compiles it)")
        if in_capture and self.traced:
            raise RuntimeError("ditron.task: a traced megakernel cannot be captured in a CUDA "
                               "graph (it synchronises after each call)")
        self._calls += 1
        self._pad.order.follow()  # after the previous call, on whichever stream it ran
        if self.traced:
            self._trace.zero_()
            rt.backend.synchronize(rt.world.device)
            t0 = tracing.host_clock()
        try:
            self._launch()
        except BaseException as exc:  # KeyboardInterrupt too: the interpreter stops mid-call
            if not in_capture:  # a capture runs nothing
                self._failed = f"{type(exc).__name__}: {exc}"[:200]
            raise
        if self.traced:
            rt.backend.synchronize(rt.world.device)
            t1 = tracing.host_clock()
            rows = self.last_trace = self._trace[1:].view(-1, codegen.TRACE_FIELDS).tolist()
            labels = [(self.tasks[k].name, tile) for k, tile in
                      zip(self.schedule.item_task, self.schedule.item_tile, strict=True)]
            tracing.record_items(f"megakernel {self.graph.name}", rows, labels,
                               int(self._trace[0]), t0, t1)
        if not in_capture and (rt.wait_timeout > 0 or rt.world.backend == "cpu"):
            try:
                with use(rt.world):  # its world's diagnostics, whichever world is current
                    check_waits()
            except WaitTimeoutError as exc:
                raise self._explain(exc) from None

    def free(self) -> None:
        """Return the scoreboard to the symmetric heap (like ``ditron.free``: every rank, in
        the same order as its other frees and allocations), once no rank calls the
        megakernel any more and this rank's calls have ended; a later call raises
        ``RuntimeError``. Without it, each compiled megakernel keeps its scoreboard for the
        life of the process. Freeing twice does nothing, and so does freeing one whose world
        was shut down (its heap went with it); either way it lets go of that heap."""
        if self._pad is not None:
            if not self._rt.closed:
                self._rt.heap.free(self._pad.signals)
            self._pad = None
            self._launch = None  # its bound arguments hold the heap's mapping
            self._release()  # the generated module, unless another megakernel holds it

    def _explain(self, exc: WaitTimeoutError) -> WaitTimeoutError:
        match = re.fullmatch(r"megakernel:.*\[(\d+)\]", exc.signal)
        if not match:
            return exc
        slot = int(match[1])
        words = [describe_slot(self.tasks, self.schedule, s)
                 for s in (slot, *self._blocked_by(slot, exc.expected))]
        what = "; it waits for ".join(words)
        return WaitTimeoutError(exc.rank, f"{exc.signal} ({what}, call {exc.expected})",
                                exc.expected, exc.seen, exc.timeout)

    def _blocked_by(self, slot: int, epoch: int) -> list[int]:
        """Why ``slot`` (short of ``epoch`` when a wait gave up) was short, when it is one of
        this rank's own items: the chain of its waits still short after the launch, each an
        own item's, ending at a slot another rank sets (or the start of its call), which
        is where the hang comes from. Which of several waits gives up first is a race; the
        chain's end does not depend on it."""
        s = self.schedule
        seen = self._pad.signals.tolist()

        def own_item(slot: int) -> int | None:
            rank, item = s.setter(slot)
            return item if rank == s.rank else None

        chain = []
        while (item := own_item(slot)) is not None:
            short = [d for d in s.waits(item) if seen[d] < epoch]
            if not short:
                break
            slot = next((d for d in short if own_item(d) is None), short[0])
            chain.append(slot)
        return chain

    def __repr__(self) -> str:
        s = self.schedule
        waits = len(s.dep_slot)
        return (f"Megakernel({self.graph.name!r}: {len(self.tasks)} tasks, "
                f"{s.n_items} tiles, {waits} waits on rank {s.rank}, {self.programs} "
                f"programs)")


def compile_graph(graph: TaskGraph, *, programs: int | None = None,
                  num_warps: int | None = None,
                  trace: bool | None = None, outline: bool = True,
                  **launch_options) -> Megakernel:
    """Derive this rank's schedule and build the megakernel (collective: every rank calls it
    for the same graph; it allocates the scoreboard in the symmetric heap).

    ``programs``: persistent programs per rank (default: see the module docstring);
    ``num_warps`` (default: ``graph.num_warps()``, what its tasks asked for) and other
    keywords (``num_stages``...) go to the Triton launch;
    ``trace``: record every item's start, end of waits, end of tile and end (after its
    notifies) and hand them to ``ditron.trace`` after each call, which then synchronises
    (default: ``ditron.trace.enabled()``, i.e. ``DITRON_TRACE=1``); ``outline``: call the
    tile functions out of line (default), which keeps the kernel's registers near those of
    its largest tile however many tasks it has; ``False`` inlines them into the item loop,
    faster for a few small tasks (their loop-invariant values are computed once per
    program), slower or spilling for many (``docs/megakernel.md``). Raises
    ``ValueError`` before any kernel runs, on every rank, when ranks built different graphs
    (tasks, tile counts, argument kinds, tensor dtypes) or graphs whose regions imply
    different dependencies between two ranks (``Schedule.links``), when a region is
    invalid on any rank (see :func:`derive`; that rank raises its own error), or when
    ``programs``, ``num_warps``, a keyword that is no Triton launch option or a tensor
    argument's device is refused (on one rank alone: the others raise naming its
    problem)."""
    rt = current()
    w = rt.world
    what = f"ditron.task: compile of graph {graph.name!r}"
    # a rank refusing its own arguments joins the gather its peers make in the agreement
    # below with its error, so that they raise too instead of waiting for it
    with refused_together(what, peers=w.world_size > 1):
        if programs is not None:
            programs = check_int(programs, "compile: programs", 1)
        num_warps = check_warps(num_warps, "compile: num_warps")
        known = launch_option_names()
        unknown = sorted(k for k in launch_options if known and k not in known)
        if unknown:  # the interpreter ignored them; Triton raised at the first call
            raise ValueError(f"compile: {', '.join(map(repr, unknown))} is not a Triton "
                             f"launch option (those are {', '.join(sorted(known))})")
        for task in graph.tasks:
            for name, arg in zip(task.params, task.args, strict=True):
                for value in flatten(arg):  # a tuple's tensors too
                    if isinstance(value, TensorDescriptor):
                        value = value.base
                    if isinstance(value, torch.Tensor) and value.device != w.device:
                        raise ValueError(f"task {task.name!r}: argument {name!r} is on "
                                         f"{value.device}, the world computes on {w.device}")
    agree(what, remember=False, **_fingerprint(graph))
    with refused_together(what, peers=w.world_size > 1):
        schedule = derive(graph.tasks, w.rank, w.world_size,
                          local_world_size=w.local_world_size, is_symmetric=is_symmetric,
                          heap_rank=heap_rank)
        # written and loaded here (held until the Megakernel holds it): a rank that cannot
        # (its cache folder a file, a disk full) tells its peers in the agreement below
        release = codegen.hold(graph.tasks, outline)[1]
    try:
        if w.world_size > 1:
            _agree_on_schedules(what, graph, schedule)
        mk = Megakernel(graph, schedule, programs or _default_programs(w.device,
                                                                         w.local_world_size),
                        {"num_warps": num_warps or graph.num_warps(), **launch_options},
                        tracing.enabled() if trace is None else trace, outline)
    finally:
        release()  # dropped here if no Megakernel holds it (a refused compile)
    if w.world_size > 1:
        barrier()  # every scoreboard is zeroed before any rank's first call
    return mk
