"""Compile every kernel launch recorded on the CPU backend with Triton's CUDA compiler.

No GPU needed: a stand-in driver reports an sm_90 (Hopper) target, and each distinct launch
recorded with ``DITRON_RECORD_LAUNCHES=DIR`` is compiled through ``JITFunction.warmup``
(front end, TTGIR, LLVM, PTX and ptxas), which catches what the interpreter lets through:
mismatched atomic types, non-constexpr globals, str defaults of constexpr parameters.

    DITRON_RECORD_LAUNCHES=/tmp/launches python -m pytest -q
    python tools/cuda_compile_check.py /tmp/launches [--registers N]

Distinct launches compile in parallel, one process per CPU (``DITRON_COMPILE_JOBS=n``).
``--registers N`` also lists, for the ``N`` kernels with the most spilled bytes, then the
most registers per thread (``ptxas -v`` for sm_90a), the launch that spills most and how
many of the kernel's launches spill: register pressure found without a GPU (``ptxas -v``'s
reports are kept in Triton's cache by the PTX: a kernel unchanged since the last check runs
no ptxas again, as its binary comes from that cache too). The constexprs
are the recorded ones, so a kernel whose tiles or warps differ on the CPU backend (the
GEMMs, the fused collectives' one warp) shows its CPU choice, except where a test runs it
with the GPU's (``tests/kernels/test_gpu_tiles.py``: the GEMMs' default configs, which it
also checks for spills).

The kernels of :data:`SPILL_FREE` choose the same tiles and warps on both backends, so their
recorded launches are the GPU's: a launch of theirs that spills registers fails the check
(a spill there cost the GPU up to 2x, found late in sessions 52 and 53).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import hashlib
import importlib
import importlib.util
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile

os.environ["DITRON_BACKEND"] = "cuda"
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.driver import CudaDriver  # noqa: E402
from triton.runtime import driver  # noqa: E402


class _Hopper(CudaDriver):
    """Enough of a CUDA driver for ``warmup`` to compile for sm_90 without a device."""

    def __init__(self):  # no libcuda here
        pass

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    @classmethod
    def is_active(cls):
        return True


#: modules whose kernels launch on the CPU backend exactly as on a GPU and must not spill
SPILL_FREE = ("ditron.kernels.gather_sum:", "ditron.kernels.routing:")

# constexpr switches the CPU backend records with its own values; compile what a GPU runs
# (the global timer instead of a logical clock, 16-bit dots without the fp32 upcast, the
# GPU-only fences of the TMA engine and of the megakernel, whose switch is ON_GPU)
_ON_GPU = {"GPU_TIMER": True, "ON_GPU": True, "UPCAST": False, "GPU": True}


def _on_gpu(name: str):
    """The GPU value of switch ``name``, also as a task's parameter of a megakernel
    (``t<k>_UPCAST``, ``ditron.task.codegen``); None if ``name`` is no such switch."""
    match = re.fullmatch(r"t\d+_(\w+)", name)
    return _ON_GPU.get(name, _ON_GPU.get(match[1]) if match else None)


def _resolve(qualified: str, path: str | None = None):
    module, _, name = qualified.partition(":")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError:
        if not path or not os.path.exists(path):  # a generated module (ditron.task) is
            raise  # loaded from its file
        spec = importlib.util.spec_from_file_location(module, path)
        obj = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(obj)
        sys.modules[module] = obj
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _injected(rec) -> bool:
    """A megakernel (``ditron.task``) calling tile functions of a script: they are set on
    its module after loading, which this process cannot repeat."""
    path = rec.get("file") or ""
    if not os.path.basename(path).startswith("ditron_megakernel_") or not os.path.exists(path):
        return False
    with open(path) as f:
        return any(line.startswith("# task_") and line.rstrip().endswith(", injected")
                   for line in f)


def _build(desc):
    if "tensordesc" in desc:
        from triton.tools.tensor_descriptor import TensorDescriptor

        d = desc["tensordesc"]
        numel = 1 + sum((n - 1) * s for n, s in zip(d["shape"], d["strides"], strict=True))
        base = torch.empty(numel, dtype=getattr(torch, d["dtype"]))
        return TensorDescriptor(base, d["shape"], d["strides"], d["block_shape"],
                                d.get("padding", "zero"))
    if "tensor" in desc:
        return torch.empty(64, dtype=getattr(torch, desc["tensor"]))
    if "namedtuple" in desc:
        return _resolve(desc["namedtuple"])(*[_build(d) for d in desc["items"]])
    if "tuple" in desc:
        return tuple(_build(d) for d in desc["tuple"])
    if "value" in desc:
        return desc["value"]
    if "tl_dtype" in desc:
        import triton.language as tl

        return tl.dtype(desc["tl_dtype"])
    raise ValueError(f"cannot rebuild argument {desc}")


def _specialized(value):
    """The class of a runtime int that Triton specializes on (1, multiple of 16, other)."""
    if isinstance(value, dict) and isinstance(value.get("value"), int) and not isinstance(
            value["value"], bool):
        v = value["value"]
        return {"value": 1 if v == 1 else 16 if v % 16 == 0 else 3}
    if isinstance(value, dict) and "tensordesc" in value:  # shape/strides: as runtime ints
        d = value["tensordesc"]
        cls = [1 if v == 1 else 16 if v % 16 == 0 else 3 for v in d["shape"] + d["strides"]]
        return {"tensordesc": dict(d, shape=cls[:len(d["shape"])], strides=cls[len(d["shape"]):])}
    if isinstance(value, dict) and "items" in value:
        return dict(value, items=[_specialized(d) for d in value["items"]])
    return value


def _key(kernel, rec) -> str:
    """Launches that compile to the same binary share a key (runtime ints by class)."""
    pairs = zip(kernel.params, rec["args"], strict=False)
    args = [d if p.is_constexpr else _specialized(d) for p, d in pairs]
    kwargs = {k: (d if _on_gpu(k) is None else {"value": _on_gpu(k)})
              for k, d in rec["kwargs"].items()}
    return json.dumps([rec["kernel"], args, kwargs], sort_keys=True)


def _short(exc: BaseException) -> str:
    text = f"{exc}"
    errors = [ln for ln in text.splitlines() if "error" in ln.lower()]
    return "\n    ".join(errors[:6] or text.splitlines()[-6:])


@dataclasses.dataclass(frozen=True)
class Usage:
    """What one compiled launch uses per thread / per program (``ptxas -v``, sm_90a)."""

    kernel: str
    constexprs: str
    registers: int
    spilled: int  # bytes of spill stores
    shared: int  # bytes of shared memory


def _ptxas_report(ptx: str) -> str:
    """``ptxas -v``'s report (stderr) for ``ptx`` on sm_90a, kept in Triton's cache by the
    PTX and the ptxas binary: the same PTX gets the same report, and a kernel whose binary
    came from that cache would otherwise run ptxas again (most of a warm check's time)."""
    from triton.runtime.cache import get_cache_manager

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    stat = os.stat(ptxas)
    key = hashlib.sha256(f"ptxas -arch=sm_90a -v {ptxas} {stat.st_size} {stat.st_mtime_ns}\n"
                         f"{ptx}".encode()).hexdigest()
    cache = get_cache_manager(key)
    path = cache.get_file("ptxas-v.log")
    if path is not None:
        with open(path) as f:
            return f.read()
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        log = subprocess.run([ptxas, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True, check=True).stderr
    cache.put(log, "ptxas-v.log", binary=False)
    return log


def _usage(rec, compiled) -> Usage:
    log = _ptxas_report(compiled.asm["ptx"])
    regs = max(map(int, re.findall(r"Used (\d+) registers", log)), default=0)
    spilled = max(map(int, re.findall(r"(\d+) bytes spill stores", log)), default=0)
    consts = ", ".join(f"{k}={d['value'] if _on_gpu(k) is None else _on_gpu(k)}"
                       for k, d in sorted(rec["kwargs"].items())
                       if isinstance(d, dict) and "value" in d)
    return Usage(rec["kernel"], consts, regs, spilled, compiled.metadata.shared)


def _compile(rec, usage: bool = False) -> tuple[str | None, Usage | None]:
    """Compile one recorded launch: the failure's report or None, and with ``usage`` its
    :class:`Usage`."""
    kernel = _resolve(rec["kernel"], rec.get("file"))
    args = [_build(d) for d in rec["args"]]
    kwargs = {k: _build(d) for k, d in rec["kwargs"].items()}
    kwargs.update({k: _on_gpu(k) for k in kwargs if _on_gpu(k) is not None})
    try:
        compiled = kernel.warmup(*args, grid=(1,), **kwargs)
        return None, _usage(rec, compiled) if usage else None
    except Exception as exc:  # noqa: BLE001 - report every failing kernel
        return (f"FAIL {rec['kernel']}:\n    {_short(exc)}\n"
                f"    caused by: {_short(exc.__cause__ or exc)}"), None


def _compile_checked(rec, registers: int) -> tuple[str | None, Usage | None]:
    """:func:`_compile`, with the usage when listing registers or for a spill-free kernel."""
    return _compile(rec, registers > 0 or rec["kernel"].startswith(SPILL_FREE))


def _print_usage(used: list[Usage], kernels: int) -> None:
    """Per kernel, worst first: its launch with the most spills (then registers), and how
    many of its launches spill."""
    by_kernel: dict[str, list[Usage]] = {}
    for u in used:
        by_kernel.setdefault(u.kernel, []).append(u)
    worst = [(max(us, key=lambda u: (u.spilled, u.registers)), us)
             for us in by_kernel.values()]
    worst.sort(key=lambda pair: (-pair[0].spilled, -pair[0].registers, pair[0].kernel))
    print(f"{'spilled B':>9} {'regs':>4} {'smem KB':>7} {'spilling':>9}  kernel (its worst "
          f"launch's constexprs)")
    for u, us in worst[:kernels]:
        spilling = f"{sum(x.spilled > 0 for x in us)}/{len(us)}"
        print(f"{u.spilled:9d} {u.registers:4d} {u.shared / 1024:7.1f} {spilling:>9}  "
              f"{u.kernel} ({u.constexprs})")


def distinct_launches(directory: str) -> tuple[list[dict], int]:
    """The recorded launches of ``directory`` that compile to distinct binaries (one record
    each), and how many were skipped as defined in a script or in a module that a test
    made and removed (neither importable here; a module of ``ditron`` or ``tests`` that
    fails to import is an error)."""
    sys.path.insert(0, os.getcwd())  # kernels recorded from the tests import as tests.*
    done: set[str] = set()
    todo = []
    skipped = 0
    for path in sorted(glob.glob(os.path.join(directory, "launches-*.jsonl"))):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                if rec["kernel"].startswith(("__main__:", "__mp_main__:")) or _injected(rec):
                    skipped += 1
                    continue
                try:
                    fn = _resolve(rec["kernel"], rec.get("file"))
                except ModuleNotFoundError as exc:
                    own = rec["kernel"].partition(":")[0]
                    if exc.name == own or (exc.name or "").split(".")[0] in ("ditron", "tests"):
                        raise
                    skipped += 1  # a generated megakernel of a test's temporary module
                    continue
                key = _key(fn, rec)
                if key not in done:
                    done.add(key)
                    todo.append(rec)
    return todo, skipped


def default_jobs() -> int:
    """Compile processes: ``DITRON_COMPILE_JOBS`` (an integer >= 1; ``SystemExit`` naming
    the variable otherwise), else one per CPU."""
    value = os.environ.get("DITRON_COMPILE_JOBS", "").strip()
    if not value:
        return max(1, os.cpu_count() or 1)
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise SystemExit(f"cuda_compile_check: DITRON_COMPILE_JOBS must be an integer >= 1, "
                         f"got {value!r}")
    return jobs


def compile_all(todo: list[dict], registers: int = 0, jobs: int | None = None
                ) -> list[tuple[str | None, Usage | None]]:
    """:func:`_compile_checked` of every record of ``todo`` (in any order), on ``jobs``
    processes (default ``DITRON_COMPILE_JOBS``, else one per CPU); ``registers > 0``: the
    usage of every launch."""
    driver.set_active(_Hopper())
    jobs = jobs or default_jobs()
    if jobs > 1 and len(todo) > 1:
        # forked workers inherit the stand-in driver and the loaded modules
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return list(pool.imap_unordered(
                functools.partial(_compile_checked, registers=registers), todo))
    return [_compile_checked(rec, registers) for rec in todo]


def main(directory: str, registers: int = 0) -> int:
    """Compile each distinct recorded launch, on ``DITRON_COMPILE_JOBS`` processes (default:
    one per CPU; each compile is one thread of LLVM and ptxas); with ``registers``, list
    that many kernels by spills, then registers."""
    todo, skipped = distinct_launches(directory)
    jobs = default_jobs()
    results = compile_all(todo, registers, jobs)
    failures = 0
    for report, usage in results:
        if report is None and usage is not None and usage.kernel.startswith(SPILL_FREE) \
                and usage.spilled:
            report = (f"SPILLS {usage.kernel} ({usage.constexprs}): {usage.spilled} bytes, "
                      f"{usage.registers} registers (a GPU launch: it must not spill)")
        if report is not None:
            failures += 1
            print(report)
    if registers:
        _print_usage([u for _, u in results if u is not None], registers)
    kernels = {rec["kernel"] for rec in todo}
    print(f"cuda compile check (sm_90): {len(todo)} distinct launches of {len(kernels)} "
          f"kernels, {failures} failed ({skipped} launches from scripts or temporary modules "
          f"skipped; {jobs} jobs)")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", nargs="?", default="/tmp/ditron-launches")
    parser.add_argument("--registers", type=int, default=0, metavar="N",
                        help="list the N kernels with the most spills, then registers")
    cli = parser.parse_args()
    raise SystemExit(main(cli.directory, cli.registers))
