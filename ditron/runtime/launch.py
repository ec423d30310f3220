"""``ditron.launch``: start local rank processes, run a function on each, gather results.

CPU ranks are forked from a fork server that has already imported torch, triton and ditron
with Triton's interpreter on, so starting a world costs a fork per rank, not an import; the
server never touches CUDA (a process forked after CUDA was initialised cannot use it, and
neither can the server's children). CUDA ranks are spawned fresh (CUDA cannot be forked),
as the CUDA backend whatever the caller's default (a caller on the CPU backend has the
interpreter on: its ranks must not inherit that when they import ditron). Ranks
rendezvous through a file in a private temporary directory. If a rank raises, the others
are killed and the original exception is re-raised in the caller with the rank and the
remote traceback attached as a note; nothing is left behind: no process, no shared-memory
segment, no temporary file. That holds too when the caller gets SIGTERM during the launch
(it stops its ranks and removes its files, then dies of the signal); a caller killed outright
(SIGKILL) cannot clean up, but its ranks see it gone and exit. A launch that times out
(``DITRON_LAUNCH_TIMEOUT``) first asks the ranks still running where they are: its
``TimeoutError`` shows each one's stack, first the ranks handling an exception (a rank
that refused its arguments waits in a host gather to tell its peers of it, and they may be
waiting in another call: the cause).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import math
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from . import interpret as interpret_mod
from .config import Settings, SettingsError, check_backend, default_backend, env_flag
from .integers import as_int, check_int


class RankError(RuntimeError):
    """A rank failed in a way that has no picklable exception (crash, unpicklable error)."""

    def __init__(self, rank: int, message: str):
        self.rank = rank
        super().__init__(f"rank {rank}: {message}")


class LaunchTimeoutError(TimeoutError):
    """A launch whose ranks ran past ``DITRON_LAUNCH_TIMEOUT`` (or did not finish starting,
    or shutting down, in time); its message says where each rank was."""


@dataclasses.dataclass(frozen=True)
class RankFailure:
    """What :func:`launch` attaches to every exception it raises for a failed rank (read it
    with :func:`rank_failure`): the rank, ``headline`` (one line: which rank failed and
    how) and ``traceback``, the rank's own traceback ending in its error (``""`` where
    none came back: a process that died)."""

    rank: int
    headline: str
    traceback: str


#: the attribute of an exception raised by :func:`launch` for a failed rank
_FAILURE = "_ditron_rank_failure"


def rank_failure(exc: BaseException) -> RankFailure | None:
    """How ``exc`` failed on a rank where :func:`launch` raised it for a failed rank (its
    own exception re-raised, or a :class:`RankError`); ``None`` for any other exception."""
    failure = getattr(exc, _FAILURE, None)
    return failure if isinstance(failure, RankFailure) else None


_IN_RANK = False  # set in a rank's process: a launch there is refused
_RUNNING_FN = False  # set in a rank's process once it calls ``fn``


def _rank_main(conn, asks, call: bytes, env: dict[str, str], backend: str,
               group: list[int] | None) -> None:
    """A rank's process: ``call`` is ``(fn, args, kw)`` pickled by value
    (:func:`_check_picklable`), so that the rank works on its own copies."""
    global _IN_RANK, _RUNNING_FN
    _IN_RANK = True
    # A fork-server child starts with the server's environment: take the caller's instead.
    os.environ.clear()
    os.environ.update(env)
    _exit_with_launcher(conn)
    out = _Outbox(conn)
    _answer_where(asks, out)
    from . import world as world_mod

    try:
        world_mod.init(backend, group=group)
        fn, args, kw = pickle.loads(call)
        out.send(("ready",))
        _RUNNING_FN = True
        result = fn(*args, **kw)
        if world_mod.is_initialized():  # fn may have shut down itself
            from .diagnostics import check_waits

            check_waits()
        try:
            data = _dumps_by_value(("ok", result))
        except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing
            raise TypeError(f"ditron.launch: fn's result on rank {env['RANK']} cannot be "
                            f"pickled back to the launching process (return tensors, "
                            f"numbers, module-level classes...): {type(exc).__name__}: "
                            f"{exc}") from exc
        out.send_bytes(data)
        # a rank whose shutdown fails (a device error that its synchronisation surfaces, a
        # peer in another collective call) fails the launch: the launcher waits for this
        world_mod.shutdown()
        out.send(("closed",))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
        tb = traceback.format_exc()
        try:
            payload = pickle.dumps(exc)
        except Exception:  # noqa: BLE001
            payload = None
        out.send(("err", payload, f"{type(exc).__name__}: {exc}", tb))
    finally:
        out.close()


class _Outbox:
    """A rank's end of its pipe to the launcher, shared by the rank's main thread (start-up,
    result, error) and the thread that answers where the rank is (:func:`_answer_where`):
    one message at a time, and none once closed."""

    def __init__(self, conn) -> None:
        self._conn, self._lock = conn, threading.Lock()

    def send(self, msg) -> None:
        self.send_bytes(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))

    def send_bytes(self, data: bytes) -> None:
        with self._lock:
            if not self._conn.closed:
                self._conn.send_bytes(data)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _answer_where(asks, out: _Outbox) -> None:
    """Answer each request of the launcher on ``asks`` (it sends one when the launch times
    out) with where this rank's main thread is: the exception it is handling, if any, and
    its stack from ``fn`` on. A thread, which answers while the main thread is blocked in a
    collective (it holds the GIL only between the interpreter's steps). It ends when the
    launcher closes ``asks``."""
    main = threading.main_thread().ident

    def serve() -> None:
        while True:
            try:
                asks.recv_bytes()
                try:
                    where = _where(main)
                except Exception as exc:  # noqa: BLE001 - an answer all the same
                    where = (None, None, f"  (its stack could not be read: {exc!r})")
                out.send(("where", *where))
            except (EOFError, OSError):
                return

    threading.Thread(target=serve, name="ditron-where", daemon=True).start()


#: where a rank was (:func:`_where`): the exception it was handling and its traceback
#: (``None`` when none), and its stack
_Where = tuple[str | None, str | None, str]
_WHERE_FRAMES = 10  # frames of a stuck rank's stack, and of the exception it handles, shown
_NOISE = ("torch", "triton", "numpy")  # packages whose inner frames a stack report skips


def _where(thread: int | None) -> _Where:
    """The exception ``thread`` is handling, as its type and message and as its traceback's
    last frames (both ``None`` when none), and its stack from ``fn`` on: the frames of
    ``_rank_main``'s callees, of each run of frames in torch, triton or numpy only the
    first (the call into it), and of a longer stack ``fn``'s frame and the innermost."""
    exc = sys._current_exceptions().get(thread)
    if isinstance(exc, tuple):  # Python 3.11: exc_info
        exc = exc[1]
    summary = raised = None
    if isinstance(exc, BaseException):
        summary = f"{type(exc).__name__}: {exc}"
        raised = "".join(traceback.format_exception(exc, limit=-_WHERE_FRAMES,
                                                    chain=False)).rstrip()
    frames = []
    frame = sys._current_frames().get(thread)
    while frame is not None and frame.f_code is not _rank_main.__code__:
        frames.append(frame)
        frame = frame.f_back
    kept, noise = [], False
    for f in reversed(frames):
        package = str(f.f_globals.get("__name__", "")).partition(".")[0]
        if not (noise and package in _NOISE):
            kept.append((f, f.f_lineno))
        noise = package in _NOISE

    def text(frames) -> str:
        return "".join(traceback.StackSummary.extract(frames).format()).rstrip()

    if len(kept) <= _WHERE_FRAMES:
        return summary, raised, text(kept)
    # fn's own frame (the line of the user's code), then the innermost ones
    return summary, raised, f"{text(kept[:1])}\n  ...\n{text(kept[1 - _WHERE_FRAMES:])}"


class _ByValuePickler(pickle.Pickler):
    """Plain pickling, with every tensor that views a larger storage (a symmetric tensor's
    storage is the whole heap; a slice shares its base's) sent as a compact copy."""

    def reducer_override(self, obj):
        import torch

        if (type(obj) is torch.Tensor and obj.layout == torch.strided
                and obj.untyped_storage().nbytes() > obj.numel() * obj.element_size()):
            copy = obj.detach().clone().requires_grad_(obj.requires_grad)
            return copy.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _dumps_by_value(msg) -> bytes:
    """``msg`` pickled with tensors by value. ``Connection.send`` would pickle them with
    multiprocessing's reducers, which share a tensor's storage through a file descriptor
    that the launcher fetches while unpickling: that fails once the rank has exited (a race
    with the launcher) and for heap tensors, whose mapping's descriptor is closed. A CUDA
    tensor comes back on its device (the launcher then initialises CUDA)."""
    buf = io.BytesIO()
    _ByValuePickler(buf, pickle.HIGHEST_PROTOCOL).dump(msg)
    return buf.getvalue()


def _exit_with_launcher(conn) -> None:
    """End this rank's process once the launching process is gone without stopping it (it
    was killed by SIGKILL, say). The launcher holds the only read end of ``conn``'s pipe, and
    the kernel reports an error on the write end once no reader is left: a thread blocks in
    ``poll`` on it, which costs nothing until then. (Watching the parent process would not
    do: a CPU rank's parent is the fork server, which outlives the launcher for as long as
    any rank runs, since each of its children holds the server's liveness pipe.)"""
    fd = os.dup(conn.fileno())  # stays open, unlike conn, until the process ends
    poller = select.poll()
    poller.register(fd, 0)  # no event asked for: POLLERR and POLLHUP are reported anyway

    def watch() -> None:
        while not any(events & (select.POLLERR | select.POLLHUP | select.POLLNVAL)
                      for _, events in poller.poll()):
            pass
        if _RUNNING_FN:  # before, nothing of it ran: no one to tell (a Ctrl-C at start-up)
            os.write(2, f"ditron rank {os.environ.get('RANK', '?')}: the process that "
                        f"launched it is gone; exiting\n".encode())
        os._exit(1)

    threading.Thread(target=watch, name="ditron-launcher-watch", daemon=True).start()


_CPU_CONTEXT = None


def _in_rank_reimport() -> bool:
    """Whether this call runs from the top level of the launching script while a rank
    process re-imports it (``multiprocessing`` runs it there as ``__mp_main__``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__mp_main__":
            return True
        frame = frame.f_back
    return False


def _cpu_context():
    """A fork server with ditron (and so torch and triton) imported, interpreter on."""
    global _CPU_CONTEXT
    if _CPU_CONTEXT is None:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["ditron"])
        # DITRON_BACKEND: the server's ``import ditron`` must not probe for GPUs, which
        # initialises CUDA in the process every rank is forked from
        with environment(TRITON_INTERPRET="1", DITRON_BACKEND="cpu"), _sigint_ignored():
            from multiprocessing import forkserver

            forkserver.ensure_running()
        _CPU_CONTEXT = ctx
    return _CPU_CONTEXT


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored (main thread only) while the block starts a process, which inherits
    it: the fork server imports ditron (torch: seconds) before it ignores SIGINT itself, and
    a Ctrl-C then printed the import's ``KeyboardInterrupt`` traceback. Its children, the
    CPU ranks, inherit the ignoring: Ctrl-C reaches the launching process, which stops
    them (:func:`launch`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _rank_interpreter(backend: str) -> tuple[str, dict[str, str | None]]:
    """``TRITON_INTERPRET`` for ranks of ``backend``, and the environment changes their
    processes start with (:func:`environment`; CPU ranks fork from the server and need
    none). CUDA ranks start without the interpreter, as the CUDA backend: a caller whose
    default is the CPU backend has it on for itself (the test suite on a GPU host); a
    caller whose default is CUDA and who set ``TRITON_INTERPRET`` asked for what the cuda
    backend cannot do, and is told so before any rank starts."""
    if backend == "cpu":
        return "1", {}
    if env_flag("TRITON_INTERPRET") and default_backend() != "cpu":
        raise RuntimeError(f"ditron.launch: {interpret_mod.NOT_WITH_CUDA}.")
    return "", {"DITRON_BACKEND": backend, "TRITON_INTERPRET": None}


@contextlib.contextmanager
def environment(**values: str | None):
    """Environment variables set (``None``: removed) for the processes started inside: a
    new process imports ditron, and so decides about the interpreter, with the environment
    it starts with."""
    def put(items) -> None:
        for name, value in items:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    saved = [(name, os.environ.get(name)) for name in values]
    try:
        put(values.items())
        yield
    finally:
        put(saved)


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def launch(fn: Callable[..., Any], world_size: int, *args, backend: str | None = None,
           groups: Sequence[Sequence[int]] | None = None, **kw) -> list[Any]:
    """Run ``fn(*args, **kw)`` on ``world_size`` local ranks; return the results by rank.

    Each rank is a new process in which ``ditron.init(backend)`` has run, so ``fn`` can
    call ``ditron.world()``, allocate symmetric tensors and launch kernels. ``groups``
    splits the job into several Ditron worlds: a partition of ``range(world_size)`` into
    lists of ranks, each process running ``ditron.init(backend, group=its list)``
    (``torch.distributed``'s default group still spans the job). ``backend`` and ``groups``
    are the launch's own keywords, never passed on to ``fn``. ``fn`` and its
    arguments must be picklable (a module-level function); each rank gets its own copy of
    the arguments (tensors included: a rank writing into one changes neither the caller's
    nor another rank's; a CUDA tensor's copy is on the rank's own GPU). Results are pickled
    back. As
    with ``multiprocessing``, a script that calls ``launch`` guards it with
    ``if __name__ == "__main__":`` (CUDA ranks are spawned and re-import the script). A
    rank cannot launch ranks of its own.

    The first rank that raises (or dies) ends the launch: the others are killed and its
    exception is raised here with ``.rank`` and the remote traceback as a note, both also
    read by :func:`rank_failure` (a rank that died, or whose error cannot be pickled,
    raises :class:`RankError`; an error raised in ``torch.distributed``, as a peer's
    failure causes, waits up to 2 s for another rank's root cause first). A rank's result
    counts once the rank has also shut its worlds down: an error there (a device error its
    last synchronisation surfaces, say), a process that ends there, or a shutdown still
    running 30 s after the last rank returned fails the launch too. With
    ``DITRON_LAUNCH_TIMEOUT`` set, ranks that have not returned that long after start-up
    are killed with a :class:`LaunchTimeoutError` (a ``TimeoutError``) naming them and
    showing where each was (its stack; first the ranks handling an exception, the likely
    cause) and the ranks that had returned; without it such a launch waits for ever.
    Ctrl-C (``KeyboardInterrupt`` in the launching process) kills the ranks on its way out;
    CPU ranks ignore SIGINT themselves (a terminal's Ctrl-C reaches the whole group).

    Equivalent, without Ditron, to running ``fn`` under ``torchrun --nproc-per-node``.
    """
    if _in_rank_reimport():
        raise RuntimeError(
            "ditron.launch: called while a rank process re-imports the script that launched "
            "it; put the call under `if __name__ == \"__main__\":` (every rank starts by "
            "importing that script)")
    if _IN_RANK:
        raise RuntimeError(
            "ditron.launch cannot be called inside a rank of another launch; launch once with "
            "the ranks you need (groups= splits them into several Ditron worlds)")
    world_size = check_int(world_size, "ditron.launch: world_size", 1)
    if not callable(fn):
        raise TypeError(f"ditron.launch: fn must be callable, got {fn!r}")
    group_of = _group_of(groups, world_size)
    call = _check_picklable(fn, args, kw)
    backend = check_backend(backend) if backend else default_backend()
    settings = Settings.from_env(backend)
    if backend == "cuda" and not _cuda_visible():  # before any rank starts
        raise SettingsError(
            "ditron.launch: backend 'cuda' but no CUDA device is visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
            "use backend='cpu' (DITRON_BACKEND=cpu, --backend cpu) to run on the CPU")
    ctx = _cpu_context() if backend == "cpu" else mp.get_context("spawn")

    interpret, start = _rank_interpreter(backend)
    job = uuid.uuid4().hex[:12]
    procs, conns, asks = [], [], []
    workdir = None
    failed = True
    with _stop_on_sigterm(lambda: _stop(procs, conns + asks, workdir, job)):
        try:
            workdir = tempfile.mkdtemp(prefix="ditron-launch-")
            job_env = {
                "DITRON_JOB": job,
                "WORLD_SIZE": str(world_size),
                "LOCAL_WORLD_SIZE": str(world_size),
                "DITRON_INIT_METHOD": f"file://{os.path.join(workdir, 'rendezvous')}",
                "TRITON_INTERPRET": interpret,
                # what the rank runs as, should it ask default_backend()
                "DITRON_BACKEND": backend,
            }
            for rank in range(world_size):
                env = dict(os.environ, **job_env, RANK=str(rank), LOCAL_RANK=str(rank))
                parent, child = ctx.Pipe(duplex=False)
                ask_in, ask_out = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_rank_main,
                                args=(child, ask_in, call, env, backend, group_of[rank]),
                                name=f"ditron-rank{rank}", daemon=True)
                with environment(**start):
                    p.start()
                child.close()
                ask_in.close()
                procs.append(p)
                conns.append(parent)
                asks.append(ask_out)
            results = _collect(procs, conns, asks, settings.launch_timeout)
            failed = False
            return results
        finally:
            for p in procs:  # ranks that have shut down are exiting; give them a moment
                p.join(timeout=_SHUTDOWN_SECONDS if p.exitcode is None and not failed else 0)
            _stop(procs, conns + asks, workdir, job)


def _check_picklable(fn, args, kw) -> bytes:
    """``(fn, args, kw)`` pickled by value (tensors as copies, :class:`_ByValuePickler`),
    for every rank to unpickle its own copy: the processes' own arguments shared a tensor's
    memory with the caller and every rank (an in-place update on one rank showed on the
    others and in the caller), unlike torchrun's ranks. ``TypeError`` unless the ranks can
    unpickle it: pickled, and no function or class of ``__main__`` where the ranks cannot
    import ``__main__`` (the caller's is ``python -c``, standard input or a notebook: the
    ranks would fail as they start, each with its own traceback, instead)."""
    from_main: list[str] = []

    class Pickler(_ByValuePickler):
        def reducer_override(self, obj):
            import torch

            if (isinstance(obj, (type, types.FunctionType))
                    and getattr(obj, "__module__", None) == "__main__"):
                from_main.append(obj.__qualname__)
            if type(obj) is torch.Tensor and obj.is_cuda:  # parameters' data come here too
                return _on_rank_device, (obj.detach().cpu(), obj.requires_grad, obj.device)
            return super().reducer_override(obj)

    buf = io.BytesIO()
    try:
        Pickler(buf, pickle.HIGHEST_PROTOCOL).dump((fn, args, kw))
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing
        raise TypeError(f"ditron.launch: fn and its arguments must be picklable (define fn at "
                        f"module level): {exc}") from exc
    if from_main and not _main_importable():
        raise TypeError(f"ditron.launch: {', '.join(sorted(set(from_main)))} defined in "
                        f"__main__, which the rank processes cannot import (python -c, "
                        f"standard input, an interactive session or a notebook); define it "
                        f"in a module or a script file")
    return buf.getvalue()


def _on_rank_device(host: Any, requires_grad: bool, device: Any) -> Any:
    """A CUDA tensor argument of :func:`launch` as a rank unpickles it (after ``init``): a
    copy on the rank's own GPU where the rank runs on CUDA, as torchrun's ranks make their
    own (pickled as is, every rank's copy went to the caller's GPU: one copy per rank
    there), else on the caller's ``device``."""
    from . import world as world_mod

    rt = world_mod.current() if world_mod.is_initialized() else None
    if rt is not None and rt.world.device.type == "cuda":
        device = rt.world.device
    return host.to(device).requires_grad_(requires_grad)


def _main_importable() -> bool:
    """Whether a new process can import this process's ``__main__`` as ``multiprocessing``
    does: by module name (``python -m``) or from its file."""
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None):
        return True
    path = getattr(main, "__file__", None)
    return isinstance(path, str) and os.path.isfile(path)


def _stop(procs, conns, workdir: str | None, job: str) -> None:
    """Kill the ranks still running, close their pipes, remove the job's files. Idempotent:
    the SIGTERM handler may run it in the middle of the launch's own cleanup."""
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=10)
    for c in conns:
        c.close()
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)
    _remove_segments(job)


@contextlib.contextmanager
def _stop_on_sigterm(stop: Callable[[], None]):
    """While the block runs, SIGTERM calls ``stop`` (the launch's ranks and files) and then
    ends the process as SIGTERM's default action would, exit status included; without this
    the ranks would run on as orphans. Only in the main thread (the only one that may set
    handlers) and only over the default action: a program that handles SIGTERM or ignores
    it decides for itself (a handler that raises unwinds through the launch, which cleans
    up on the way out). SIGINT (KeyboardInterrupt) is left alone: it unwinds likewise."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL):
        yield
        return

    def handler(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM waits for stop()
        try:
            stop()
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(128 + signal.SIGTERM)  # not reached: the signal ends the process first

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _group_of(groups, world_size: int) -> list[list[int] | None]:
    """Each rank's group of ``groups`` (``None`` each when ``groups`` is ``None``)."""
    if groups is None:
        return [None] * world_size

    def is_list(value) -> bool:  # a sequence of ranks, as group_ranks takes one
        return isinstance(value, Sequence) and not isinstance(value, (str, bytes))

    message = (f"ditron.launch: groups must split range({world_size}) into non-empty lists "
               f"of ranks, each rank in one (a list of rank lists, e.g. [[0, 1], [2, 3]]), "
               f"got {groups!r}")
    if not is_list(groups) or not all(is_list(g) for g in groups):
        raise ValueError(message)
    parts = [[as_int(r) for r in g] for g in groups]
    flat = [r for g in parts for r in g]
    if None in flat or sorted(flat) != list(range(world_size)) or not all(parts):
        raise ValueError(message)
    return [next(g for g in parts if r in g) for r in range(world_size)]


@dataclasses.dataclass
class _Failure:
    rank: int
    payload: bytes | None = None
    summary: str = ""
    traceback: str = ""
    exitcode: int | None = None
    unpickling_error: Exception | None = None  # the rank's message could not be unpickled
    in_shutdown: bool = False  # the process ended after its result came, shutting down

    @property
    def secondary(self) -> bool:
        """A communication error that a peer's failure causes (a reset connection)."""
        return "torch/distributed" in self.traceback and self.exitcode is None


_GRACE_SECONDS = 2.0  # after a first failure, how long to look for its root cause
_SHUTDOWN_SECONDS = 30.0  # how long ranks that returned may take to shut down
_STARTUP_SECONDS = 300.0  # least time ranks get to start (spawn, CUDA init, rendezvous)
_WHERE_SECONDS = 5.0  # how long ranks that timed out get to say where they are


def _collect(procs, conns, asks, timeout: float) -> list[Any]:
    """Results by rank. ``timeout`` (> 0) bounds how long ranks may run ``fn`` once every
    rank has initialized; start-up (spawn, CUDA context, rendezvous) gets its own bound of
    at least ``_STARTUP_SECONDS``. Ranks that run past it are asked (on ``asks``) where
    they are, for the ``TimeoutError``."""
    results: list[Any] = [None] * len(procs)
    pending = {c: r for r, c in enumerate(conns)}  # ranks that have not closed (or failed)
    sentinels = {p.sentinel: r for r, p in enumerate(procs)}
    started: set[int] = set()
    returned: set[int] = set()  # ranks whose result came: they are shutting down
    failures: list[_Failure] = []
    first_failure = 0.0
    start_deadline = time.monotonic() + max(timeout, _STARTUP_SECONDS)
    deadline = closing = None
    while pending:
        if failures:
            left = max(first_failure + _GRACE_SECONDS - time.monotonic(), 0)
        elif len(started) < len(procs) and timeout > 0:
            left = max(start_deadline - time.monotonic(), 0)
        else:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if len(returned) == len(procs):  # only shutdowns left: they get a bound too
                closing = closing or time.monotonic() + _SHUTDOWN_SECONDS
                left = min(left if left is not None else math.inf,
                           max(closing - time.monotonic(), 0))
        ready = mpc.wait(list(pending) + list(sentinels), timeout=left)
        if not ready:
            if failures:
                break
            wheres = _ask_where(sorted(pending.values()), conns, asks, pending, procs,
                                results, failures, started, returned)
            if failures or not pending:  # a rank failed (the cause) or all closed meanwhile
                break
            if len(started) < len(procs):
                late = sorted(set(range(len(procs))) - started)
                head = (f"ranks {late} did not finish starting within "
                        f"{max(timeout, _STARTUP_SECONDS):g} s")
            elif len(returned) == len(procs):
                late = sorted(pending.values())
                bound = (f"{_SHUTDOWN_SECONDS:g} s of the last rank's return"
                         if closing is not None and time.monotonic() >= closing
                         else f"{timeout:g} s after every rank started (DITRON_LAUNCH_TIMEOUT)")
                head = (f"ranks {late} returned from fn but did not finish ditron.shutdown "
                        f"within {bound}")
            else:
                late = sorted(set(pending.values()) - returned)
                head = (f"ranks {late} had not returned {timeout:g} s after every rank "
                        f"started (DITRON_LAUNCH_TIMEOUT)")
            raise LaunchTimeoutError(_timed_out(f"ditron.launch: {head}; they were killed",
                                                late, wheres, sorted(returned - set(late))))
        for obj in ready:
            if obj in sentinels:
                conn = conns[sentinels.pop(obj)]
                while conn in pending:  # drain: "ready" may precede the result
                    _receive(conn, pending, procs, results, failures, started, returned)
            elif obj in pending:
                _receive(obj, pending, procs, results, failures, started, returned)
        if deadline is None and timeout > 0 and len(started) == len(procs):
            deadline = time.monotonic() + timeout
        if failures and not first_failure:
            first_failure = time.monotonic()
        if failures and not any(f.secondary for f in failures):
            break
    if failures:
        failed = {f.rank for f in failures}
        _raise_failure(min(failures, key=lambda f: (f.secondary, f.exitcode is not None)),
                       sorted(returned - failed))
    return results


def _ask_where(ranks: list[int], conns, asks, pending, procs, results, failures,
               started, returned) -> dict[int, _Where]:
    """Ask ``ranks`` where they are (:func:`_answer_where`) and wait up to
    ``_WHERE_SECONDS`` for their answers, by rank; a result or a failure that comes
    meanwhile is received as usual."""
    wheres: dict[int, _Where] = {}
    for rank in ranks:
        with contextlib.suppress(OSError):  # the rank has just ended
            asks[rank].send_bytes(b"where")
    deadline = time.monotonic() + _WHERE_SECONDS
    while True:
        waiting = [conns[r] for r in ranks if r not in wheres and conns[r] in pending]
        left = deadline - time.monotonic()
        if not waiting or left <= 0:
            return wheres
        for conn in mpc.wait(waiting, timeout=left):
            _receive(conn, pending, procs, results, failures, started, returned, wheres)


def _timed_out(head: str, late: list[int], wheres: dict[int, _Where],
               returned: list[int]) -> str:
    """The message of a launch that timed out: ``head``, then where each rank of ``late``
    was, first those handling an exception (a rank that refused its arguments waits in a
    host gather to tell its peers, who may be in another call: the likely cause), then the
    ranks that had ``returned``."""
    def indent(text: str) -> str:
        return "\n".join("  " + line for line in text.splitlines())

    lines = [f"{head}. Where they were:"]
    for rank in sorted(late, key=lambda r: (wheres.get(r, (None,))[0] is None, r)):
        if rank not in wheres:
            lines.append(f"rank {rank} did not say within {_WHERE_SECONDS:g} s (busy in "
                         f"native code?)")
            continue
        summary, raised, stack = wheres[rank]
        if summary is not None:
            lines.append(f"rank {rank} was handling {summary} (likely the cause):\n"
                         f"{indent(raised or '')}\n  and was waiting at:\n{indent(stack)}")
        else:
            lines.append(f"rank {rank} was at:\n{stack}")
    if returned:
        lines.append(f"ranks {returned} had returned from fn (if the others were waiting in a "
                     f"collective, the ranks made different collective calls)")
    return "\n".join(lines)


def _receive(conn, pending, procs, results, failures, started, returned: set[int],
             wheres: dict[int, _Where] | None = None) -> None:
    """Take one message of ``rank``: started, where it is, its result (it then shuts down:
    ``returned``), closed (done), or its error; or the end of its process."""
    rank = pending[conn]
    try:
        data = conn.recv_bytes()
    except EOFError:  # the process ended without a word
        del pending[conn]
        procs[rank].join(timeout=5)
        failures.append(_Failure(rank, exitcode=procs[rank].exitcode,
                                 in_shutdown=rank in returned))
        return
    try:
        msg = pickle.loads(data)
    except Exception as exc:  # noqa: BLE001 - fn's result: the other messages always load
        del pending[conn]
        failures.append(_Failure(rank, unpickling_error=exc))
        return
    if msg[0] == "ready":
        started.add(rank)
        return
    if msg[0] == "where":
        if wheres is not None:
            wheres[rank] = msg[1:]
        return
    if msg[0] == "ok":
        results[rank] = msg[1]
        returned.add(rank)
        return
    del pending[conn]
    if msg[0] != "closed":
        failures.append(_Failure(rank, *msg[1:]))


def _exit_reason(code: int, in_shutdown: bool = False) -> str:
    """Why a rank's process ended before returning (``in_shutdown``: after returning, in
    ``ditron.shutdown``), from its exit code."""
    when = "in ditron.shutdown, after fn returned" if in_shutdown else "before returning"
    if code >= 0:
        return f"process exited with code {code} {when} (its output above says why)"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = (": a bad memory access, e.g. a kernel's pointer or peer rank out of range (the "
            "CPU backend runs kernels in the rank's own process)") if name == "SIGSEGV" else ""
    return f"process was killed by {name} {when}{hint}"


def _raise_failure(failure: _Failure, returned: Sequence[int] = ()):
    """Raise ``failure`` in the launching process, naming the ranks that had ``returned``
    from ``fn`` by then (a rank waiting for one of them in a collective fails too). The
    exception raised carries a :class:`RankFailure` (:func:`rank_failure`)."""
    rank = failure.rank
    if failure.exitcode is not None:
        raise _marked(RankError(rank, _exit_reason(failure.exitcode, failure.in_shutdown)))
    if failure.unpickling_error is not None:
        error = failure.unpickling_error
        raise _marked(RankError(rank, f"its result could not be unpickled in the launching "
                                      f"process ({type(error).__name__}: {error})")) from error
    if returned:
        failure.traceback += (f"\n[ditron] ranks {list(returned)} had already returned from "
                              f"fn (if this rank failed waiting in a collective, the ranks "
                              f"made different collective calls)")
    exc = None
    if failure.payload is not None:
        try:
            exc = pickle.loads(failure.payload)
        except Exception:  # noqa: BLE001
            exc = None
    failed = f"rank {rank} failed:"
    if not isinstance(exc, BaseException):  # its error could not come back: its text did
        raise _marked(RankError(rank, f"{failure.summary}\n{failure.traceback}"),
                      failed, failure.traceback)
    if isinstance(exc, SystemExit):  # sys.exit in fn: raised here, it would end the caller
        code = exc.code
        status = 0 if code is None else int(code) if isinstance(code, int) else 1
        exc = RankError(rank, f"process exited with code {status} (SystemExit({code!r}), "
                              f"e.g. sys.exit) without returning a result")
        failed = f"{exc}:"
    try:
        exc.rank = rank
    except (AttributeError, TypeError):  # an exception that takes no attributes
        exc = RankError(rank, f"{failure.summary}\n{failure.traceback}")
    note = f"[ditron] raised on rank {rank}; remote traceback:\n{failure.traceback}"
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]
    raise _marked(exc, failed, failure.traceback)


def _marked(exc: BaseException, headline: str | None = None,
            traceback: str = "") -> BaseException:
    """``exc``, failed on the rank it names (``exc.rank``), with its :class:`RankFailure`:
    ``headline`` (default: ``exc``'s message) and the rank's ``traceback``."""
    setattr(exc, _FAILURE, RankFailure(exc.rank, headline or str(exc), traceback.rstrip()))
    return exc


def _remove_segments(job: str) -> None:
    """Segments are unlinked right after mapping; this catches a rank killed in between."""
    from .backends.cpu import segment_path

    for path in glob.glob(segment_path(job, 0)[:-1] + "*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
