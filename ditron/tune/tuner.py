"""The one tuner: enumerate candidates, measure each on every rank, agree, cache.

A candidate is (method, engine, tile config). Every rank runs the same fixed number of
warm-up and timed calls per candidate (CUDA events on GPU, the host clock on CPU; never
``triton.testing.do_bench``, whose adaptive counts differ across ranks and would deadlock a
collective), takes the median, the ranks agree on the slowest rank's median (all-reduce max
over the host group), so every rank picks the same candidate from the same numbers
(failures are agreed too: :func:`all_ok`). Rank 0 caches the decision on disk
(``tune/cache.py``), where the ops' ``method="auto"`` reads it through
``decisions.lookup`` (which sits below the ops; this module sits above them).

The first pass measures every candidate in ``FIRST_PASS_ROUNDS`` rounds, the second in
reverse order. The decision against the fallback is confirmed: the fastest overlapped
candidates (those within ``CONFIRM_WITHIN`` of the best, the fastest of each engine first,
``CONFIRM_MAX`` in all), the default overlapped candidate (the op's default engine and
tiles) and the fallback are measured again, alternating, for ``CONFIRM_ROUNDS`` rounds or
more (the order rotates, so every candidate runs at every position of a round once); the
fastest overlapped one over those rounds is chosen if its median beats the fallback's by
``MARGIN`` (2%, env ``DITRON_TUNE_MARGIN``). A single pass can rank two candidates wrongly
when they differ by less than the run-to-run noise (up to 10% measured for GEMM-RS on 2
H200s), and its first trial, the fallback, runs on a GPU fresh from idle (on 2 H200s it
measured faster than the bare GEMM alone, session 8); rotating rounds see the same drifts,
and the margin keeps ``auto`` from trading a sure baseline for a gain inside the noise.

On CUDA a second pass decides for calls captured in CUDA graphs (``Decision.graph``, read
by the ops in graph mode): every candidate that ran is captured and its replays timed in
rotating rounds, then the close ones, the default and the captured fallback again, as
eagerly, with the same margin against the fallback. Graph replays have no
host time and the graph-safe variants count epochs on the device, so the two modes can
rank candidates differently (the pulled GEMM-RS, docs/perf.md session 10).

Knobs (:class:`Trial`): overlap vs fallback, the tile configuration, for ``ag_gemm`` the
transfer engine, the chunk size and, with the ``sm`` engine, the SMs given to communication
(``COMM_SMS``; the GEMM's ``GemmConfig.programs`` is the rest), for ``gemm_rs`` the engine
(colocated stores from the GEMM, or the copy engine by segments, pushed or pulled), the
copy engine's chunk size and, pushed, ``early_rows`` (own rows in the last peer's GEMM),
pulled, two uneven chunks (``chunk_rows=(seg - r, r)``); their candidates come from timing
``torch.matmul`` on the row counts they would launch (:func:`early_rows_for`,
:func:`split_rows_for`). Engines that compute with ``torch.matmul`` (``MATMUL_ENGINES``)
are tried with the first tile config only.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from ..kernels.gemm import (
    CPU_CONFIG,
    EPI_ALL_REDUCE,
    EPI_REDUCE_SCATTER,
    EPI_STORE,
    GemmConfig,
    default_config,
    fits,
    scalar_loads,
)
from ..runtime import bounded_cache
from ..runtime.agreement import agree, refused_together
from ..runtime.config import SettingsError, env_float
from ..runtime.cuda_graphs import capture, collectives_capturable, graph_mode
from ..runtime.integers import check_int
from . import cache
from .decisions import ENGINES, Decision, b_layout, conditions, key_for, lookup

__all__ = ["Decision", "Trial", "agreed_median", "all_ok", "early_rows_for", "key_for", "lookup",
           "rotations", "say", "split_rows_for", "time_calls", "tune", "tune_margin"]

# measured on one H200 (docs/perf.md, bench/gemm_lab.py): the first is the default for
# aligned 16-bit operands; the others win on some shapes; 256x128 never did. The tuner
# tries the op's own default for the operands first (:func:`default_candidates`: fp32 and
# unaligned operands run tiles not in this list)
GPU_CANDIDATES = [
    GemmConfig(128, 256, 64, 8, 8, 3, flatten=True, tma_store=True),
    GemmConfig(128, 256, 64, 8, 8, 3),
    GemmConfig(128, 128, 64, 8, 4, 4, flatten=True, tma_store=True),
]
CPU_CANDIDATES = [CPU_CONFIG, dataclasses.replace(CPU_CONFIG, block_m=32, block_n=32)]
#: overlap must beat the fallback by this fraction in the confirmation rounds
MARGIN = 0.02
CONFIRM_ROUNDS = 3
#: rounds of the first pass over every candidate, the second in reverse order: a drift of
#: the GPU's clocks during the pass (5-10% on 2 H200s, docs/perf.md session 15) then costs
#: the early and the late candidates alike
FIRST_PASS_ROUNDS = 2
#: overlapped candidates within this fraction of the best one are confirmed too (at most
#: ``CONFIRM_MAX`` in all, the fastest of each engine first): one candidate's bad rounds
#: then do not hand the decision to the fallback when another overlapped candidate was as
#: fast (seen on 2 H200s, session 7), and an engine the first pass ranked low by noise gets
#: a second look (AG-GEMM on 2 H200s, session 14: 5-13% between the tuner's and the
#: benchmark's times of the same engine)
CONFIRM_WITHIN = 0.08
CONFIRM_MAX = 3


def tune_margin() -> float:
    """``DITRON_TUNE_MARGIN`` (default :data:`MARGIN`): a fraction below 1 (``0.05``: 5%
    faster). ``SettingsError`` where it is not a number, or is 1 or more: no overlapped
    candidate could then win (``DITRON_TUNE_MARGIN=2`` meant as 2% cached the fallback for
    every shape). A negative margin takes overlap even where it is slower."""
    margin = env_float("DITRON_TUNE_MARGIN", MARGIN)
    if margin >= 1:
        raise SettingsError(f"DITRON_TUNE_MARGIN must be a fraction below 1 (0.05 for 5%), "
                            f"got {os.environ['DITRON_TUNE_MARGIN'].strip()!r}: no "
                            f"overlapped candidate could win")
    return margin


def prefer_overlap(fallback_us: float, overlap_us: float, margin: float = MARGIN) -> bool:
    """Whether the overlapped path wins: faster than the fallback by at least ``margin``."""
    return overlap_us <= fallback_us * (1.0 - margin)


#: the ops :func:`tune` measures
TUNED_OPS = ("ag_gemm", "gemm_rs", "gemm_ar")
#: the layouts of ``b`` the tuner times (``decisions.B_LAYOUTS`` less "strided": such calls
#: take the cost model)
TUNED_LAYOUTS = ("t", "n")
# transfer engines the tuner tries per op: ``decisions.ENGINES`` (ops not listed move data
# one way only), the engines a cached decision may name
#: on GPUs: the colocated AG-GEMM (remote loads inside the GEMM) took 10-200x the copy
#: engine's time on every shape of the 2-H200 run (docs/perf.md, session 5), so it is not tried
GPU_ENGINES = {"ag_gemm": ("copy_engine", "sm", "copy_engine_matmul"),
               "gemm_rs": ("colocated", "copy_engine", "copy_engine_pull")}
#: chunks per segment tried with the copy-engine GEMM-RS engines besides their default (a
#: whole segment pushed; halves pulled)
RS_CHUNKINGS = {"copy_engine": (2, 4), "copy_engine_pull": (4,)}
#: engines that compute with ``torch.matmul`` per chunk: no tile config to vary
MATMUL_ENGINES = {"ag_gemm": ("copy_engine_matmul",),
                  "gemm_rs": ("copy_engine", "copy_engine_pull")}
#: SMs given to communication tried with the "sm" AG-GEMM engine (the GEMM gets the rest)
COMM_SMS = (16, 32)
#: ``early_rows`` candidates step by this many rows (a cuBLAS tile's height), up to half a
#: segment; a candidate is tried only if its two GEMMs beat two halves by ``EARLY_GAIN``,
#: the ``EARLY_TRIALS`` best of them, timed in ``EARLY_PASSES`` passes
EARLY_STEP = 128
EARLY_GAIN = 0.01
#: two-chunk splits for the pulled GEMM-RS: the smaller chunk has at least this fraction of
#: a segment (:func:`split_rows_for`)
SPLIT_LEAST = 0.375
EARLY_TRIALS = 2
EARLY_PASSES = 4


@dataclasses.dataclass(frozen=True)
class Trial:
    """One candidate: ``method`` ("overlap" | "fallback"), the tile config, the transfer
    engine and its knobs (``chunk_rows``: rows per chunk, or each chunk's rows of a GEMM-RS
    segment, None for the op's default; ``early_rows``: GEMM-RS by the copy engine only)."""

    method: str
    config: GemmConfig
    engine: str
    chunk_rows: int | tuple[int, ...] | None = None
    early_rows: int = 0

    def label(self) -> str:
        early = f" early={self.early_rows}" if self.early_rows else ""
        return f"{self.method} {self.engine} chunk={self.chunk_rows}{early} {self.config.label()}"

    def decision(self, time_us: float, graph: Decision | None = None) -> Decision:
        return Decision(self.method, self.config, self.engine, time_us, self.chunk_rows,
                        self.early_rows, graph)


def time_calls(fn, warmup: int, iters: int, device: torch.device,
               batch: int = 1) -> list[float]:
    """Per-call times in microseconds: ``iters`` samples, each ``batch`` calls back to back
    divided by ``batch`` (fixed counts, identical on every rank). ``batch > 1`` times the
    calls as a busy stream runs them: the host issues the next call while the GPU still
    works on the last, so launch cost shows only where it exceeds the GPU time.

    With more than one rank, the ranks first meet at a host barrier (each with its GPU
    idle): a rank that finished the previous measurement early would otherwise count its
    wait for a late peer inside its first samples of this one (collective)."""
    from ..runtime.world import current, is_initialized

    if is_initialized() and current().world.world_size > 1:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier(group=current().host_group)
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        for _ in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / batch)
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - t0) * 1e6 / batch)
    return times


def agreed_median(times: list[float]) -> float:
    """The slowest rank's median (all ranks get the same number)."""
    from ..runtime.world import current

    rt = current()
    med = torch.tensor([statistics.median(times)], dtype=torch.float64, device="cpu")
    if rt.world.world_size > 1:
        dist.all_reduce(med, op=dist.ReduceOp.MAX, group=rt.host_group)
    return float(med.item())


def all_ok(ok: bool) -> bool:
    """Whether ``ok`` holds on every rank (collective: every rank gets the same answer), so
    that a candidate failing on one rank drops out on all of them."""
    from ..runtime.world import current

    rt = current()
    flag = torch.tensor([1.0 if ok else 0.0], device="cpu")
    if rt.world.world_size > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=rt.host_group)
    return flag.item() > 0


def say(line: str, end: str = "\n") -> bool:
    """Print ``line`` on stderr; ``False`` where stderr cannot take it (closed, a pipe whose
    reader has gone, none at all): the tuners' output never raises, as rank 0 raising
    there left its peers waiting in its next collective."""
    if sys.stderr is None:  # print would take stdout
        return False
    try:
        print(line, end=end, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        return False
    return True


class StatusLine:
    """The tuner's status line on stderr (where ``on``): on a terminal one line rewritten
    in place, each rewrite padded over the last; elsewhere (a log) a line per step. Output
    stops where stderr cannot take it (:func:`say`)."""

    def __init__(self, on: bool) -> None:
        self.on, self.width = on, 0
        try:
            self.live = on and bool(sys.stderr.isatty())
        except (OSError, ValueError, AttributeError):  # closed, or no stderr
            self.live = False

    def show(self, line: str) -> None:
        if self.live:
            self.live = self.on = say(f"\r{line:<{self.width}}", end="")
            self.width = max(self.width, len(line))
        elif self.on:
            self.on = say(line)

    def done(self) -> None:
        """End the rewritten line (the lines printed next start a line of their own)."""
        if self.live and self.width:
            self.live = self.on = say("")
            self.width = 0


def _checked(op: str, M: int, N: int, K: int, dtype: torch.dtype, warmup: int, iters: int,
             batch: int | None, candidates, layout: str, W: int, dev: torch.device) -> tuple:
    """:func:`tune`'s arguments checked on this rank (``ValueError`` naming the first bad
    one; ``RuntimeError`` in graph mode, ``cuda_graphs.graph_mode``): ``op, M, N, K,
    warmup, iters, batch`` as ints (``batch`` defaulted), the given candidates that fit
    ``dev`` (``None`` where none were given: the operands pick them,
    :func:`default_candidates`), and the margin (:func:`tune_margin`)."""
    from ..ops.tp_gemm import DTYPES

    if graph_mode():  # the trials would time the graph-safe variants as the eager decision
        raise RuntimeError("tune: cannot time inside a CUDA graph capture or "
                           "ditron.ops.graph_safe() (the ops run their graph-safe variants "
                           "there, and a capture cannot synchronize); tune before capturing")
    if op not in TUNED_OPS:
        raise ValueError(f"tune: op must be one of {', '.join(TUNED_OPS)}, got {op!r}")
    M, N, K = (check_int(v, f"tune: {name}", 1) for name, v in (("M", M), ("N", N), ("K", K)))
    if op != "gemm_ar" and M % W:
        raise ValueError(f"tune: {op} splits M = {M} rows over {W} ranks; M must divide by {W}")
    if dtype not in DTYPES:
        raise ValueError(f"tune: dtype must be one of {', '.join(map(str, DTYPES))} (the ops' "
                         f"dtypes), got {dtype!r}")
    warmup = check_int(warmup, "tune: warmup")
    iters = check_int(iters, "tune: iters", 1)
    if batch is not None:
        batch = check_int(batch, "tune: batch", 1)
    if layout not in TUNED_LAYOUTS:
        raise ValueError(f"tune: layout must be one of {', '.join(TUNED_LAYOUTS)} (b as a "
                         f"transposed weight, row-major), got {layout!r}")
    if candidates is not None and (
            not isinstance(candidates, (list, tuple)) or not candidates
            or not all(isinstance(c, GemmConfig) for c in candidates)):
        # an empty list was said not to fit shared memory; anything else failed inside
        raise ValueError(f"tune: candidates must be a non-empty list of GemmConfig, got "
                         f"{candidates!r}")
    if batch is None:
        batch = 4 if dev.type == "cuda" else 1
    if candidates is not None:
        # A config that cannot load fails on some ranks while their peers already wait in
        # the kernel; drop what does not fit before any launch.
        candidates = [c for c in candidates if fits(c, dev, dtype)]
        if not candidates:
            raise ValueError(f"tune: no candidate tile config fits shared memory for {dtype}")
    return op, M, N, K, warmup, iters, batch, candidates, tune_margin()


def default_candidates(op: str, a: torch.Tensor, b: torch.Tensor, dev: torch.device,
                       scalar: bool) -> list[GemmConfig]:
    """The tile configs :func:`tune` tries for ``op`` on ``a @ b`` (``scalar``: their loads
    cannot be vectorized, ``kernels.gemm.scalar_loads``): first the one the op runs with
    untuned on these operands (``kernels.gemm.default_config``: for fp32 or unaligned
    operands not :data:`GPU_CANDIDATES`' first, which spills there, or for fp32 does not
    fit shared memory at all), then those of :data:`GPU_CANDIDATES` (on the CPU
    :data:`CPU_CANDIDATES`) that fit the device's shared memory."""
    epilogue = {"gemm_rs": EPI_REDUCE_SCATTER, "gemm_ar": EPI_ALL_REDUCE}.get(op, EPI_STORE)
    own = default_config(dev, a.dtype, (a, b), epilogue, scalar=scalar)
    listed = GPU_CANDIDATES if dev.type == "cuda" else CPU_CANDIDATES
    return [own] + [c for c in listed if c != own and fits(c, dev, a.dtype)]


def tune(op: str, M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, *,
         warmup: int = 3, iters: int = 5, batch: int | None = None,
         candidates: list[GemmConfig] | None = None, progress: bool = True,
         save: bool = True, layout: str = "t") -> Decision:
    """Measure the fallback and every (tile config, engine) of ``op``'s overlapped path
    with fixed warm-up and iteration counts on every rank (``iters`` samples of ``batch``
    back-to-back calls; default 4 on GPU, 1 on CPU); the slowest rank's median decides (the
    same winner on every rank), rank 0 caches it (collective).

    Shapes as the op sees them on one rank: ``ag_gemm``: a ``[M / W, K]``, b ``[K, N]``;
    ``gemm_rs`` / ``gemm_ar``: a ``[M, K]``, b ``[K, N]``; b is timed as a transposed
    ``[N, K]`` weight (``weight.t()``), or row-major with ``layout="n"``: the decision
    serves calls whose ``b`` is laid out so (``decisions.b_layout``) and whose loads
    vectorize as these contiguous operands' do (``kernels.gemm.scalar_loads``: not where
    ``K``, or a row-major ``b``'s ``N``, is not a multiple of 16 elements and TMA does not
    load them; ``decisions.key_for``). Returns the agreed
    decision. Bad arguments (``DITRON_TUNE_MARGIN`` too) raise ``ValueError`` before anything
    is allocated or timed, on every rank (a rank refusing its own names itself to its peers;
    with ``save``, ``DITRON_CACHE_VERSIONS`` and ``DITRON_GEMM_TMA`` too, which the write
    reads),
    and so do arguments or margins that differ between ranks; a call inside a CUDA graph
    capture or ``ops.graph_safe()`` raises ``RuntimeError`` so (the decision for calls
    captured in graphs comes from a pass of its own, on GPUs). One rank has nothing to
    overlap (the ops always fall back there): only the fallback is timed, and chosen. Where
    every candidate fails, the fallback too, nothing is cached and ``RuntimeError`` says why
    on every rank; so does a decision that rank 0 cannot write (``cache.CacheError``).
    ``candidates``: the tile configs to try, those that fit the device's shared memory
    (default :func:`default_candidates`: the op's untuned tiles for these operands first).
    ``progress``: rank 0 shows its progress on stderr (``StatusLine``) and the times.
    """
    from .. import ops
    from ..runtime.world import current

    rt = current()
    W, dev = rt.world.world_size, rt.world.device
    # collective: a rank refusing its arguments, or ranks passing different ones, raise on
    # every rank here, not in (or past) the first timing barrier
    with refused_together("tune"):
        op, M, N, K, warmup, iters, batch, candidates, margin = _checked(
            op, M, N, K, dtype, warmup, iters, batch, candidates, layout, W, dev)
        if save:  # rank 0's write would refuse them after the timing, alone
            cache.versions_kept()
            conditions()  # DITRON_GEMM_TMA, read again for the key
    agree("tune", remember=False, op=op, M=M, N=N, K=K, dtype=dtype, warmup=warmup,
          iters=iters, batch=batch, layout=layout,
          candidates=None if candidates is None else tuple(candidates), margin=margin)
    fn_op = getattr(ops, op)
    rows = M // W if op == "ag_gemm" else M
    g = torch.Generator(device="cpu").manual_seed(rt.world.rank)
    a = torch.randn(rows, K, generator=g).to(dtype=dtype, device=dev)
    # b as a transposed [N, K] weight (``weight.t()``, the common case) or row-major:
    # cuBLAS's and the tiles' speeds depend on the layout, so decisions are kept per layout
    b = (torch.randn(N, K, generator=g).to(dtype=dtype, device=dev).t() if layout == "t"
         else torch.randn(K, N, generator=g).to(dtype=dtype, device=dev))
    if candidates is None:  # agreed: ranks on GPUs that differ would time different lists
        candidates = default_candidates(op, a, b, dev, scalar_loads(a, b, dev))
        agree("tune: tile configs", remember=False, candidates=tuple(candidates))
    engines = (GPU_ENGINES if dev.type == "cuda" else ENGINES).get(op, ("colocated",))
    # chunk sizes matter where the copy engine moves whole chunks: a shard, a half, a quarter
    chunkings = [None] + sorted({-(-rows // d) for d in (2, 4)} - {rows}, reverse=True)
    trials = [Trial("fallback", candidates[0], engines[0])]
    for c in candidates if W > 1 else ():  # one rank: nothing to overlap, "auto" falls back
        for e in engines:
            if e in MATMUL_ENGINES.get(op, ()) and c is not candidates[0]:
                continue  # cuBLAS per chunk: no tile config to vary
            if op == "gemm_rs" and e in RS_CHUNKINGS:
                # the default (None), then segments in the engine's other chunk counts
                seg = max(M // W, 1)
                sizes = sorted({-(-seg // k) for k in RS_CHUNKINGS[e]} - {seg}, reverse=True)
                trials += [Trial("overlap", c, e, ch) for ch in [None, *sizes]]
                if e == "copy_engine":
                    trials += [Trial("overlap", c, e, None, x)
                               for x in early_rows_for(a, b, seg, batch)]
                elif e == "copy_engine_pull":
                    trials += [Trial("overlap", c, e, split)
                               for split in split_rows_for(a, b, seg, batch)]
                continue
            if e == "sm" and dev.type == "cuda":  # the knob: SMs given to communication
                sms = torch.cuda.get_device_properties(dev).multi_processor_count
                trials += [Trial("overlap", dataclasses.replace(c, programs=sms - k), e)
                           for k in COMM_SMS if k < sms]
                continue
            trials += [Trial("overlap", c, e, ch)
                       for ch in (chunkings if op == "ag_gemm" and e.startswith("copy_engine")
                                  else [None])]
    samples: dict[int, list[float]] = {i: [] for i in range(len(trials))}
    errors: dict[int, str] = {}
    order = list(range(len(trials)))
    status = StatusLine(progress and rt.world.rank == 0)
    for r in range(FIRST_PASS_ROUNDS):
        for i in order if r % 2 == 0 else order[::-1]:
            if i in errors:
                continue  # failed in an earlier round (on some rank)
            status.show(f"[ditron tune] {op} M={M} N={N} K={K}: round {r + 1}/"
                        f"{FIRST_PASS_ROUNDS}, {i + 1}/{len(trials)} {trials[i].label()}")
            try:
                times = time_calls(_call(fn_op, a, b, op, trials[i]),
                                   warmup if r == 0 else 1, iters, dev, batch)
            except Exception as exc:  # noqa: BLE001 - a config that does not compile loses
                times = []
                errors[i] = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            if all_ok(i not in errors):
                samples[i] += times
            else:
                errors.setdefault(i, "failed on another rank")
    results = [float("inf") if i in errors else agreed_median(samples[i])
               for i in range(len(trials))]
    status.done()
    if progress and rt.world.rank == 0:
        for i, (trial, t) in enumerate(zip(trials, results, strict=True)):
            shown = f"{t:10.1f} us" if t != float("inf") else "    failed   "
            say(f"[ditron tune]   {shown}  {trial.label()}"
                + (f"  ({errors[i]})" if i in errors else ""))
    best = min(range(len(trials)), key=lambda j: results[j])
    if results[best] == float("inf"):  # agreed: the same on every rank
        raise RuntimeError(f"tune: {op} M={M} N={N} K={K} {dtype}: every candidate failed, "
                           f"the fallback with {errors.get(0)}; nothing cached")
    close = confirm_set(trials, results)
    if close and results[0] != float("inf"):
        best = _confirm(trials, close, fn_op, a, b, op, warmup, iters, dev, batch,
                        progress and rt.world.rank == 0, margin)
    graph = None
    if dev.type == "cuda":
        picked = _graph_pass(trials, results, fn_op, a, b, op, iters, dev, batch,
                             progress and rt.world.rank == 0, margin)
        if picked is not None:
            graph = trials[picked[0]].decision(picked[1])
    decision = trials[best].decision(results[best], graph)
    saved = None
    if save and rt.world.rank == 0:
        try:
            # keyed as the op looks it up for these operands: b's layout, and whether
            # their loads vectorize (K or a row-major b's N not a multiple of 16 elements
            # and no TMA: the decision then serves only calls whose loads do not either)
            cache.put(key_for(op, M, N, K, dtype, W, b_layout(b), scalar_loads(a, b, dev)),
                      dataclasses.asdict(decision))
        except cache.CacheError as exc:  # every rank raises, none waits for rank 0
            saved = exc
    # "auto" decides again, now from the new decision
    bounded_cache.named("tp_gemm").drop(lambda k: k[0] == "choice")
    if not all_ok(saved is None):  # also the barrier: every rank waits for rank 0's write
        raise saved or RuntimeError("tune: rank 0 could not write the decision to the cache")
    return decision


def _graph_pass(trials: list[Trial], results: list[float], fn_op, a, b, op: str, iters: int,
                dev: torch.device, batch: int, show: bool,
                margin: float | None = None) -> tuple[int, float] | None:
    """The decision for calls captured in CUDA graphs (collective). Every trial that ran
    eagerly is captured as one graph of ``batch`` calls (overlapped ones after a warm-up
    inside ``ops.graph_safe()``); a trial that cannot be captured on some rank, such as an
    engine with no graph-safe variant, drops out on every rank, and the fallback is not
    tried where the default group's collectives cannot be captured (ranks sharing a GPU).
    The replays are timed in ``max(CONFIRM_ROUNDS, graphs)`` rounds whose order rotates;
    then, as eagerly, the trials of :func:`confirm_set` (over these times) and the fallback
    are timed again in fresh rounds, and those times decide.
    Returns ``(trial, us per call)``: the fastest overlapped trial if it beats the fallback
    by ``margin`` (default ``DITRON_TUNE_MARGIN``, else ``MARGIN``; or the fallback was not
    captured), else the fallback; ``None`` when nothing could be captured."""
    margin = tune_margin() if margin is None else margin
    graphs = {}
    for j, trial in enumerate(trials):
        if results[j] == float("inf") or (trial.method == "fallback"
                                           and not collectives_capturable()):
            continue
        try:
            graph = capture(_call(fn_op, a, b, op, trial), batch,
                            safe_warm_up=trial.method == "overlap")
        except Exception:  # noqa: BLE001 - not capturable: drops out
            graph = None
        if all_ok(graph is not None):
            graphs[j] = graph
    if not graphs:
        return None
    medians = _time_graphs(graphs, list(graphs), iters, dev, batch)
    first = dict(medians)
    # the fastest of many noisy medians is biased low: as eagerly, the close ones, the
    # default and the fallback are timed again in fresh rounds, and those times decide
    close = confirm_set(trials, [medians.get(j, float("inf")) for j in range(len(trials))])
    if close:
        medians = _time_graphs(graphs, [j for j in (0, *close) if j in graphs], iters, dev,
                               batch)
    del graphs
    torch.cuda.synchronize()
    overlapped = [j for j in medians if trials[j].method == "overlap"]
    best = min(overlapped, key=lambda j: medians[j]) if overlapped else 0
    if 0 in medians and (not overlapped
                         or not prefer_overlap(medians[0], medians[best], margin)):
        best = 0
    if show:
        for j in sorted(first, key=lambda j: first[j]):
            again = f" (again: {medians[j]:.1f})" if close and j in medians else ""
            say(f"[ditron tune]   graph {first[j]:10.1f} us{again}  {trials[j].label()}")
        say(f"[ditron tune]   under CUDA graphs -> {trials[best].label()} "
            f"(margin {margin:.0%})")
    return best, medians[best]


def _time_graphs(graphs: dict, which: list[int], iters: int, dev: torch.device,
                 batch: int) -> dict[int, float]:
    """Agreed median us per call of the graphs ``which`` (``batch`` calls each), replayed in
    ``max(CONFIRM_ROUNDS, len(which))`` rounds whose order rotates (collective)."""
    samples: dict[int, list[float]] = {j: [] for j in which}
    for r, order in enumerate(rotations(which, CONFIRM_ROUNDS)):
        for j in order:
            samples[j] += [t / batch for t in time_calls(graphs[j].replay, 2 if r == 0 else 1,
                                                         iters, dev)]
    return {j: agreed_median(samples[j]) for j in which}


def _call(fn_op, a, b, op: str, trial: Trial):
    """One call of ``op`` as ``trial`` runs it."""
    extra = ({"engine": trial.engine, "chunk_rows": trial.chunk_rows}
             if op in ("ag_gemm", "gemm_rs") else {"engine": trial.engine} if op in ENGINES
             else {})
    if trial.early_rows:
        extra["early_rows"] = trial.early_rows
    return lambda: fn_op(a, b, method=trial.method, config=trial.config, **extra)


def early_rows_for(a: torch.Tensor, b: torch.Tensor, seg: int, batch: int = 1) -> list[int]:
    """The ``early_rows`` worth trying: up to ``EARLY_TRIALS`` values of ``x`` (multiples of
    ``EARLY_STEP`` up to ``seg / 2``, at least two steps apart) whose two GEMMs, ``a[:seg +
    x] @ b`` and ``a[:seg - x] @ b``, take the least time and beat two halves by
    ``EARLY_GAIN``, fastest first; none where no split does. The GEMMs are timed where the
    pushed copy-engine GEMM-RS would launch them (collective, :func:`_row_times`). More than
    one, since single-GEMM timings on two busy GPUs are noisier than the differences
    between neighbouring splits: the op's own trials decide."""
    step = min(EARLY_STEP, max(seg // 8, 1))
    xs = range(step, min(seg // 2, a.shape[0] - seg) + 1, step)
    t = _row_times(a, b, {seg} | {seg + x for x in xs} | {seg - x for x in xs}, batch)
    return _fastest(xs, lambda x: t[seg + x] + t[seg - x], 2 * t[seg], step)


def split_rows_for(a: torch.Tensor, b: torch.Tensor, seg: int,
                   batch: int = 1) -> list[tuple[int, int]]:
    """Two-chunk splits of a segment of ``seg`` rows worth trying with the pulled GEMM-RS
    (``chunk_rows=(seg - r, r)``, the larger chunk first): up to ``EARLY_TRIALS`` values of
    ``r`` (multiples of ``EARLY_STEP`` from ``SPLIT_LEAST * seg`` to below ``seg / 2``)
    whose GEMMs ``a[:seg - r] @ b`` and ``a[:r] @ b`` beat two halves by ``EARLY_GAIN``,
    fastest first. The engine computes every chunk twice (the peer's rows, then its own),
    so the split saves twice what it saves here; the bound keeps each chunk's pull hidden
    under the other chunk's GEMM. Collective (:func:`_row_times`)."""
    step = min(EARLY_STEP, max(seg // 8, 1))
    rs = range(max(-(-math.ceil(SPLIT_LEAST * seg) // step) * step, step), -(-seg // 2), step)
    halves = (seg // 2, seg - seg // 2)
    t = _row_times(a, b, {*halves} | {r for r in rs} | {seg - r for r in rs}, batch)
    return [(seg - r, r) for r in _fastest(rs, lambda r: t[r] + t[seg - r],
                                            t[halves[0]] + t[halves[1]], step)]


def _row_times(a: torch.Tensor, b: torch.Tensor, rows: set[int], batch: int) -> dict[int, float]:
    """``{m: time of a[:m] @ b}`` (us): every rank times the same row counts in
    ``EARLY_PASSES`` passes of alternating direction; the slowest rank's medians count. No
    rows take no time."""
    ordered = sorted(m for m in rows if m > 0)
    samples: dict[int, list[float]] = {m: [] for m in ordered}
    for p in range(EARLY_PASSES):
        for m in ordered if p % 2 == 0 else ordered[::-1]:
            samples[m] += time_calls(lambda m=m: torch.matmul(a[:m], b), 1, 3, a.device, batch)
    return {0: 0.0} | {m: agreed_median(samples[m]) for m in ordered}


def _fastest(knobs, cost, base: float, step: int) -> list:
    """Up to ``EARLY_TRIALS`` of ``knobs`` (ints), cheapest ``cost`` first, each beating
    ``base`` by ``EARLY_GAIN`` and at least two steps from the ones already picked."""
    picks: list = []
    for x in sorted(knobs, key=cost):
        if len(picks) == EARLY_TRIALS or cost(x) >= base * (1 - EARLY_GAIN):
            break
        if all(abs(x - y) >= 2 * step for y in picks):
            picks.append(x)
    return picks


def rotations(names: list, rounds: int) -> list[list]:
    """Orders for ``max(rounds, len(names))`` rounds of timing ``names``: each a rotation of
    the last, so every candidate takes every position of a round at least once and a drift
    within a round (clocks falling under sustained load) costs every candidate alike."""
    n = max(len(names), 1)
    return [names[r % n:] + names[:r % n] for r in range(max(rounds, len(names)))]


def time_in_rounds(fns: dict, rounds: int, iters: int, warmup: int, device: torch.device,
                   batch: int = 1) -> dict:
    """Per-call samples (us) of each of ``fns`` (name -> callable), timed in the rounds of
    :func:`rotations`: ``warmup`` calls before a function's first round, one before each
    later one, ``iters`` samples in all (at least 2 per round). Collective like
    :func:`time_calls`: every rank must pass the same names in the same order."""
    samples: dict = {name: [] for name in fns}
    schedule = rotations(list(fns), rounds)
    per_round = max(2, -(-iters // len(schedule)))
    for r, order in enumerate(schedule):
        for name in order:
            samples[name] += time_calls(fns[name], warmup if r == 0 else 1, per_round, device,
                                        batch)
    return samples


def kernel_time(fn, warmup: int, calls: int) -> float:
    """Per-call sum of the durations of the GPU kernels (and copies) that ``calls`` calls of
    ``fn`` run, in microseconds, from the profiler: the device's work without the host's
    launch costs or gaps (CUDA only; the same ``warmup + calls`` calls on every rank)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    device = torch.autograd.DeviceType.CUDA
    return sum(e.time_range.elapsed_us() for e in prof.events()
               if e.device_type == device) / calls


def confirm_set(trials: list[Trial], results: list[float]) -> list[int]:
    """The overlapped trials the confirmation rounds measure again: of those within
    ``CONFIRM_WITHIN`` of the first pass's fastest, the fastest of each engine, then the
    next fastest (``CONFIRM_MAX`` in all), and the default overlapped trial (index 1: the
    op's default engine and tiles), since the fastest of many noisy first-pass times is
    biased low."""
    ranked = sorted((j for j in range(len(trials)) if trials[j].method == "overlap"
                     and results[j] != float("inf")), key=lambda j: results[j])
    if not ranked:
        return []
    window = [j for j in ranked if results[j] <= results[ranked[0]] * (1 + CONFIRM_WITHIN)]
    firsts = [j for k, j in enumerate(window)
              if all(trials[i].engine != trials[j].engine for i in window[:k])]
    close = (firsts + [j for j in window if j not in firsts])[:CONFIRM_MAX]
    if 1 in ranked and 1 not in close:
        close.append(1)
    return close


def _confirm(trials: list[Trial], close: list[int], fn_op, a, b, op: str, warmup: int, iters: int,
             dev: torch.device, batch: int, show: bool, margin: float | None = None) -> int:
    """Re-measure the fallback (trial 0) and the overlapped trials ``close`` alternately, in
    ``max(CONFIRM_ROUNDS, candidates)`` rounds whose order rotates (:func:`rotations`);
    return the fastest of ``close`` over those rounds if it beats the fallback by
    ``margin`` (default ``DITRON_TUNE_MARGIN``, else ``MARGIN``), else 0 (collective: every
    rank makes the same calls and gets the same agreed medians)."""
    margin = tune_margin() if margin is None else margin
    samples: dict[int, list[float]] = {j: [] for j in (0, *close)}
    failed: set[int] = set()  # a trial failing now (on any rank) drops out on every rank
    for order in rotations(list(samples), CONFIRM_ROUNDS):
        for j in order:
            if j in failed:
                continue
            error = None
            try:
                times = time_calls(_call(fn_op, a, b, op, trials[j]), warmup, iters, dev,
                                   batch)
            except Exception as exc:  # noqa: BLE001 - passed the first pass; agreed below
                times, error = None, exc
            if all_ok(times is not None):
                samples[j] += times
            elif j == 0:
                raise RuntimeError(f"tune: the fallback ({trials[0].label()}) failed while "
                                   f"being confirmed, on some rank") from error
            else:
                failed.add(j)
    medians = {j: float("inf") if j in failed else agreed_median(samples[j]) for j in samples}
    best = min(close, key=lambda j: medians[j])
    fallback_us, overlap_us = medians[0], medians[best]
    wins = prefer_overlap(fallback_us, overlap_us, margin)
    if show:
        tried = ", ".join(f"{medians[j]:.1f}" for j in close)
        say(f"[ditron tune]   confirmed over {len(rotations(list(samples), CONFIRM_ROUNDS))} "
            f"rotating rounds: fallback "
            f"{fallback_us:.1f} us, overlap {overlap_us:.1f} us (candidates: {tried}) -> "
            f"{'overlap' if wins else 'fallback'} (margin {margin:.0%})")
    return best if wins else 0
