"""On-disk cache of tuned decisions: one JSON file in ``DITRON_CACHE_DIR`` (a leading ``~``
expanded) or ~/.cache/ditron (made, with its parents, on the first write; the file takes the
umask's mode, as any file).

Keys name everything a decision depends on: op, shapes, dtype, world size, device name, the
layout of ``b`` where it is not the transposed weight the tuner assumes by default,
``scalar loads`` where the operands' loads cannot be vectorized (``kernels.gemm.
scalar_loads``; aligned operands add nothing), ``checked calls`` where a GPU world times its
ops in debug mode (a wait timeout, or ``DITRON_CHECK_CALLS``: a device synchronize after
every overlapped launch, more host gathers per call than the fallback), and the versions
of what was timed: triton's, torch's and Ditron's own, with a digest of the package's
sources (:func:`versions`: a decision measured with other compilers, libraries or kernels,
whose tiles may have meant something else, is tuned again rather than reused); e.g.
``gemm_rs|8192x4096x1376|bfloat16|w2|NVIDIA H200|b row-major, scalar loads|triton ...``
(``decisions.key_for``). Entries of other versions stay in the file (another install may
share the folder) and are never read.
Writes are atomic (temporary file + rename), so a reader never sees a torn file, and
serialized by an advisory lock on ``tune.json.lock``, so processes writing different keys at
once (two jobs tuning side by side, or users sharing the folder) keep each other's entries.
A cache that cannot be read (no such file, not JSON, not a table, or a path the process
cannot open) reads as empty: the ops then decide by the cost model; a write that fails
raises :class:`CacheError`, and so does one over a file that exists but cannot be opened
(another user's, mode 0600): it would replace their entries with this one alone. A damaged
file is replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets

import torch
import triton

from .. import __version__

FILE = "tune.json"


class CacheError(OSError):
    """The decision could not be written (names the file and why)."""


def cache_dir() -> str:
    """``DITRON_CACHE_DIR`` with a leading ``~`` expanded (a shell expands it, but not a
    systemd unit's or a Dockerfile's ``ENV``, which left a folder named ``~`` in the working
    directory), else ``~/.cache/ditron``."""
    return os.path.expanduser(os.environ.get("DITRON_CACHE_DIR") or "~/.cache/ditron")


def make_key(op: str, shape: tuple[int, ...], dtype: str, world_size: int,
             device_name: str, variant: str = "") -> str:
    """The entry's name: ``variant`` (e.g. ``b row-major``) tells apart decisions of one
    shape measured on differently laid-out operands."""
    return (f"{op}|{'x'.join(str(s) for s in shape)}|{dtype}|w{world_size}|{device_name}"
            + (f"|{variant}" if variant else "") + versions())


#: the folders of the package whose sources do not change what the ops run
_NOT_TIMED = ("benchmarks",)


def source_digest(root: str | None = None) -> str:
    """A digest of the Ditron sources under ``root`` (default: this package's folder):
    every ``.py`` file but :data:`_NOT_TIMED`'s, by path and contents. A change to a
    kernel, an engine or an op (what a tile config or an engine name means, how fast it
    runs) changes it, where the version number of a development install does not."""
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__"
                               and not (folder == root and d in _NOT_TIMED))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read() + b"\0")
    return digest.hexdigest()[:12]


def versions() -> str:
    """The keys' last part: triton's, torch's and Ditron's versions, Ditron's with
    :func:`source_digest` (taken when this module is imported, as the ops' code is: a
    source edited while a process runs does not rename the decisions it times)."""
    return _VERSIONS


_VERSIONS = (f"|triton {triton.__version__}, torch {torch.__version__}, "
             f"ditron {__version__} ({source_digest()})")


def load() -> dict:
    try:
        return _read(os.path.join(cache_dir(), FILE))
    except OSError:  # none yet, or unreadable: tune again
        return {}


def _read(path: str) -> dict:
    """The table in ``path``: ``{}`` where there is none or it is damaged (not JSON, not a
    table); ``OSError`` where the file exists and cannot be opened or read."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (ValueError, RecursionError):  # damaged: replaced by the next write
        return {}
    return data if isinstance(data, dict) else {}


def get(key: str) -> dict | None:
    return load().get(key)


@contextlib.contextmanager
def _locked(d: str):
    """Hold the folder's write lock. The lock file is opened read-only (``flock`` needs no
    more): one made by another user of a shared folder (mode 0644 under the usual umask)
    serves this user too, where opening it for writing failed and no one else could tune."""
    fd = os.open(os.path.join(d, FILE + ".lock"), os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def put(key: str, value: dict) -> None:
    """Add or replace one entry; the read-modify-write holds the lock, so no other
    process's entry written meanwhile is lost."""
    d = cache_dir()
    path = os.path.join(d, FILE)
    try:
        os.makedirs(d, exist_ok=True)
        with _locked(d):
            try:
                data = _read(path)
            except OSError as exc:  # not overwritten: its entries would be lost
                raise CacheError(f"cannot write the tuning cache {path} (DITRON_CACHE_DIR): "
                                 f"it exists and cannot be read ({exc.strerror or exc}), "
                                 f"so adding to it would drop its entries") from exc
            data[key] = value
            # a plain file's mode (the umask's), not mkstemp's 0600: a cache shared by
            # several users, or tuned under another one, stays readable to them
            tmp = os.path.join(d, f".tune-{os.getpid()}-{secrets.token_hex(4)}.json")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):  # not renamed: the write failed
                    os.unlink(tmp)
    except CacheError:
        raise
    except OSError as exc:
        why = (f"{d} is not a folder" if os.path.lexists(d) and not os.path.isdir(d)
               else exc.strerror or str(exc))
        raise CacheError(f"cannot write the tuning cache {path} (DITRON_CACHE_DIR): "
                         f"{why}") from exc
