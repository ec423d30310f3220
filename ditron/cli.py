"""``ditron`` command line: ``info``, ``demo``, ``bench NAME``, ``trace``.

Exit status (:data:`EXIT_STATUS`): 0 done; 1 failed (a rank raised, died or timed out: its
traceback is printed once, without the launching process's; or a demo's result differed
from torch's); 2 a usage error (an option or a ``DITRON_*`` variable that cannot be used, told in
one line before any rank starts); 130 interrupted (Ctrl-C: the ranks are stopped)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .runtime.arguments import positive_int
from .runtime.config import SettingsError


def _info(args: argparse.Namespace) -> int:
    import torch
    import triton

    import ditron
    from ditron.runtime.config import Settings

    settings = Settings.from_env(args.backend)
    print(f"ditron   {ditron.__version__}")
    print(f"torch    {torch.__version__}")
    print(f"triton   {triton.__version__}")
    print(f"backend  {settings.backend}" + (" (Triton interpreter)"
                                            if settings.backend == "cpu" else ""))
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            print(f"device   cuda:{i} {torch.cuda.get_device_name(i)}")
    else:
        print("device   cpu (no CUDA device visible)")
    print(f"heap     {_byte_count(settings.heap_size)} per rank (DITRON_HEAP_SIZE)")
    timeout = f"{settings.wait_timeout:g} s" if settings.wait_timeout > 0 else "off"
    longest = _longest_wait(settings.backend)
    if settings.wait_timeout > longest:  # the kernels' poll counter is an int32
        timeout += f", the kernels give up after about {longest:.0f} s"
    print(f"timeout  {timeout} (DITRON_WAIT_TIMEOUT)")
    checks = "every call" if settings.check_calls else "first call of each shape"
    print(f"agree    {checks} checked across ranks (DITRON_CHECK_CALLS; every call by "
          f"default with a wait timeout)")
    from ditron.tune import cache

    path = os.path.join(cache.cache_dir(), cache.FILE)
    keys = cache.load()
    tuned = sum(key.endswith(cache.versions()) for key in keys)  # the others are not read
    other = f" (and {len(keys) - tuned} of other versions, unused)" if len(keys) > tuned else ""
    print(f"tuned    {tuned} decision{'' if tuned == 1 else 's'}{other} in {path} "
          f"(DITRON_CACHE_DIR)")
    given = sorted(k for k in os.environ if k.startswith("DITRON_"))
    listed = ", ".join(f"{k}={os.environ[k]}" for k in given) or "no DITRON_* variable set"
    print(f"env      {listed} (every setting: docs/settings.md)")
    return 0


def _byte_count(n: int) -> str:
    """``n`` bytes in the largest binary unit that holds it exactly (``64 KiB``, ``1 GiB``):
    rounding to MiB showed a 64K heap as 0 MiB and 1536K as 2 MiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _longest_wait(backend: str) -> float:
    """The longest wait timeout the ``backend``'s kernels honour, in seconds
    (``Runtime.wait_seconds``: ``MAX_POLLS`` polls)."""
    from ditron.runtime.backends.cpu import CpuBackend
    from ditron.runtime.backends.cuda import CudaBackend
    from ditron.runtime.world import MAX_POLLS

    polls = (CpuBackend if backend == "cpu" else CudaBackend).polls_per_second
    return MAX_POLLS / polls


def _demo(args: argparse.Namespace) -> int:
    from ditron import demo

    try:  # refusals before any rank starts are usage errors, not tracebacks
        world_size, backend = demo.setup(args.world_size, n=args.n, backend=args.backend)
    except SettingsError:
        raise  # a malformed DITRON_* variable, reported by main()
    except ValueError as e:
        print(f"ditron demo: {e}", file=sys.stderr)
        return 2
    ok = demo.run(world_size, n=args.n, repeats=args.repeats, backend=backend)
    return 0 if ok else 1


def _benchmark_modules() -> list[str]:
    """The modules of ``ditron.benchmarks``, each a benchmark (found without importing)."""
    import pkgutil

    import ditron.benchmarks

    return sorted(m.name for m in pkgutil.iter_modules(ditron.benchmarks.__path__))


def _benchmarks() -> dict[str, str]:
    """Each benchmark's command name and the first line of its module's docstring."""
    found = {}
    for name in _benchmark_modules():
        doc = importlib.import_module(f"ditron.benchmarks.{name}").__doc__ or ""
        line = doc.strip().splitlines()[0] if doc.strip() else ""
        if line.startswith("``ditron bench"):  # "``ditron bench x``: what it times"
            line = line.split(": ", 1)[-1]
        found[name.replace("_", "-")] = line[:1].upper() + line[1:]
    return found


def _bench_usage(file) -> None:
    print("usage: ditron bench NAME [options]   (ditron bench NAME --help: its options)\n\n"
          "benchmarks:", file=file)
    for name, summary in _benchmarks().items():
        print(f"  {name:<12} {summary}", file=file)


def _bench(args: argparse.Namespace, rest: list[str]) -> int:
    if args.name is None:  # ``ditron bench`` alone, or ``ditron bench --help``
        wants_help = any(a in ("-h", "--help") for a in rest)
        _bench_usage(sys.stdout if wants_help else sys.stderr)
        return 0 if wants_help else 2
    name = args.name.replace("-", "_")
    # by the list of modules: importing any name took "__init__" for a benchmark (and a
    # benchmark missing one of its own imports for an unknown name)
    if name not in _benchmark_modules():
        # ``ditron bench --world-size 2 tp-gemm`` took "2" for the name
        later = [a for a in rest if a.replace("-", "_") in _benchmark_modules()]
        hint = (f" (the name comes before its options: ditron bench {later[0]} [options])"
                if later else f"; choose one of {', '.join(_benchmarks())}")
        print(f"ditron bench: unknown benchmark {args.name!r}{hint}", file=sys.stderr)
        return 2
    return importlib.import_module(f"ditron.benchmarks.{name}").main(rest)


def _trace(args: argparse.Namespace, rest: list[str]) -> int:
    module = importlib.import_module("ditron.trace")
    return module.main(rest)


#: what ``--help`` says of the exit statuses (the module's docstring says more)
EXIT_STATUS = ("exit status: 0 done, 1 failed (a rank's error; the demo: a result unlike "
               "torch's), 2 usage error, 130 interrupted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ditron", description="Ditron: compute-communication-overlapped multi-GPU "
        "kernels in stock Triton. Settings are DITRON_* environment variables "
        "(docs/settings.md).", epilog=EXIT_STATUS)
    sub = parser.add_subparsers(dest="command", required=True)
    backend_help = "default: DITRON_BACKEND, else cuda when a GPU is visible, else cpu"
    p = info = sub.add_parser("info", help="versions, backend, devices, heap size")
    p.add_argument("--backend", choices=["cpu", "cuda"], default=None, help=backend_help)
    p = demo = sub.add_parser("demo", help="ring exchange and all-gather with the primitives")
    p.add_argument("--world-size", type=positive_int, default=None,
                   help="ranks to launch (default: 4 on cpu, the number of GPUs (at least 2) "
                        "on cuda; at most 64 on cpu, or one per CPU core where there are "
                        "more, and 8 per GPU on cuda)")
    p.add_argument("--backend", choices=["cpu", "cuda"], default=None, help=backend_help)
    p.add_argument("--n", type=positive_int, default=200,
                   help="fp32 elements per rank (default %(default)s)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="rounds, each checked against torch (default %(default)s)")
    # bench and trace forward their options (``--help`` included) to their own modules
    p = sub.add_parser("bench", help="benchmarks: collectives, tp-gemm, tp-mlp, megakernel, moe",
                       add_help=False)
    p.add_argument("name", nargs="?", help="collectives | tp-gemm | tp-mlp | megakernel | moe")
    sub.add_parser("trace", help="overlap trace of an operator (Chrome trace + PNG)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command not in ("bench", "trace") and rest:  # the usage of the command given
        {"info": info, "demo": demo}[args.command].error(
            f"unrecognized arguments: {' '.join(rest)}")
    run = {"info": lambda: _info(args), "demo": lambda: _demo(args),
           "bench": lambda: _bench(args, rest), "trace": lambda: _trace(args, rest)}
    command = " ".join(["ditron", args.command, *([args.name] if args.command == "bench" and
                                                  args.name else [])])
    try:
        code = run[args.command]()
        sys.stdout.flush()  # here, where a reader gone is caught, not at exit
        return code
    except SettingsError as e:  # a DITRON_* variable: a usage error, not a traceback
        print(f"ditron: {e} (docs/settings.md)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the launch has stopped its ranks on the way out
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        failure = _launch_failure(e)
        if failure is not None:
            print(f"{command}: {failure}", file=sys.stderr)
            return 1
        if isinstance(e, BrokenPipeError):  # ``ditron info | head -1``: the reader left
            _drop_stdout()
            return 1
        raise  # a bug of the command itself: its traceback


def _launch_failure(exc: Exception) -> str | None:
    """What to print of ``exc`` where ``ditron.launch`` raised it because its ranks failed
    (a rank raised, died, or the launch timed out): the rank's own traceback, once, without
    the launching process's frames (they only lead to ``launch``); ``None`` otherwise. The
    launch marks what it raises (``rank_failure``, ``LaunchTimeoutError``), so an error of
    the command itself is never taken for a rank's, whatever its text."""
    from .runtime.launch import LaunchTimeoutError, rank_failure

    if isinstance(exc, LaunchTimeoutError):
        return str(exc)  # names the ranks and where each was
    failure = rank_failure(exc)
    if failure is None:
        return None
    return "\n".join(filter(None, (failure.headline, failure.traceback)))


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not raise again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":
    raise SystemExit(main())
