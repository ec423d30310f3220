"""On-disk cache of tuned decisions: one JSON file in ``DITRON_CACHE_DIR`` (a leading ``~``
expanded) or ~/.cache/ditron (made, with its parents, on the first write; the file takes the
umask's mode, as any file).

Keys name everything a decision depends on: op, shapes, dtype, world size, device name, the
layout of ``b`` where it is not the transposed weight the tuner assumes by default,
``scalar loads`` where the operands' loads cannot be vectorized (``kernels.gemm.
scalar_loads``; aligned operands add nothing, so keys written before alignment was part of
them still serve the aligned operands they were timed on), and the triton and torch
versions (a decision measured with other compilers and libraries is tuned again); e.g.
``gemm_rs|8192x4096x1376|bfloat16|w2|NVIDIA H200|b row-major, scalar loads|triton ...``
(``decisions.key_for``).
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
import json
import os
import secrets

import torch
import triton

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
            + (f"|{variant}" if variant else "") + VERSIONS)


VERSIONS = f"|triton {triton.__version__}, torch {torch.__version__}"


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
