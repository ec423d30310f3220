"""On-disk cache of tuned decisions: one JSON file in ``DITRON_CACHE_DIR`` (a leading ``~``
expanded) or ~/.cache/ditron (made, with its parents, on the first write; the file takes the
umask's mode, as any file).

Keys name everything a decision depends on: op, shapes, dtype, world size, device name, the
layout of ``b`` where it is not the transposed weight the tuner assumes by default,
``scalar loads`` where the operands' loads cannot be vectorized (``kernels.gemm.
scalar_loads``; aligned operands add nothing), ``checked calls`` where a GPU world times its
ops in debug mode (a wait timeout, or ``DITRON_CHECK_CALLS``: a device synchronize after
every overlapped launch, more host gathers per call than the fallback), ``pointer loads``
or ``TMA loads`` where ``DITRON_GEMM_TMA`` changes the GEMMs' load path from the device's
default (``decisions.conditions``), and the versions
of what was timed: triton's, torch's and Ditron's own, with a digest of the package's
sources (:func:`versions`: a decision measured with other compilers, libraries or kernels,
whose tiles may have meant something else, is tuned again rather than reused); e.g.
``gemm_rs|8192x4096x1376|bfloat16|w2|NVIDIA H200|b row-major, scalar loads|triton ...``
(``decisions.key_for``). Entries of other versions are never read; a write keeps those
of the ``DITRON_CACHE_VERSIONS`` (default :data:`VERSIONS_KEPT`) versions written most
recently, its own first, and drops the others (:func:`prune`): the versions an upgrade (or
each edit of a development checkout) leaves behind do not pile up, and another install
sharing the folder keeps its entries while fewer versions than that have written since it
last did. A write stamps its entry with the time
(:data:`WRITTEN`, seconds since the epoch): a version was last written when its newest
entry was (an entry without a stamp, written before Ditron stamped them, counts as written
at 0). Keys without a versions part (not made by :func:`make_key`) are never dropped.
Writes are atomic (temporary file + rename), so a reader never sees a torn file, and
serialized by an advisory lock on ``tune.json.lock``, so processes writing different keys at
once (two jobs tuning side by side, or users sharing the folder) keep each other's entries;
the pruning is part of that locked read-modify-write, so it drops no entry a writer of a
version it keeps has just added. Temporary files of a writer killed in mid-write (which
only exist while their writer holds the lock) are removed by the next write.
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
import math
import os
import secrets
import time

import torch
import triton

from .. import __version__
from ..runtime.config import env_int

FILE = "tune.json"
#: versions whose entries a write keeps (``DITRON_CACHE_VERSIONS``), the writer's among them
VERSIONS_KEPT = 4
#: the field a write adds to its entry (a dict): when it was written, in seconds since
#: the epoch (the ops' readers ignore it)
WRITTEN = "written"
#: where the versions part of a key starts (:func:`versions`)
_VERSIONS_MARK = "|triton "
#: the writers' temporary files: ``.tune-<pid>-<random>.json``
_TMP_PREFIX, _TMP_SUFFIX = ".tune-", ".json"


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
    """The entry written under ``key`` as it was given to :func:`put` (without the
    :data:`WRITTEN` stamp ``put`` adds), ``None`` where there is none."""
    entry = load().get(key)
    if isinstance(entry, dict) and WRITTEN in entry:
        entry = {k: v for k, v in entry.items() if k != WRITTEN}
    return entry


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


def versions_kept() -> int:
    """``DITRON_CACHE_VERSIONS``, default :data:`VERSIONS_KEPT`: how many versions' entries
    a write keeps (``SettingsError`` where it is not an integer >= 1)."""
    return env_int("DITRON_CACHE_VERSIONS", VERSIONS_KEPT, 1)


def version_of(key: str) -> str | None:
    """The versions part of ``key`` (from ``|triton`` to its end: :func:`versions` for the
    keys this process makes; triton's and torch's alone for those of Ditrons before
    0.1.0's digest), ``None`` where it has none (not made by :func:`make_key`)."""
    at = key.rfind(_VERSIONS_MARK)
    return key[at:] if at >= 0 else None


def _written(entry: object) -> float:
    """When ``entry`` was written (its :data:`WRITTEN`), 0 where it does not say."""
    t = entry.get(WRITTEN) if isinstance(entry, dict) else None
    ok = isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
    return float(t) if ok else 0.0


def prune(data: dict, kept: int, first: str | None = None) -> dict:
    """``data`` less the entries of all but ``kept`` versions (:func:`version_of`): the
    version ``first`` (the one just written), this process's (:func:`versions`), then the
    others by their newest entry's :data:`WRITTEN`, latest first (ties by name). Entries
    whose keys have no versions part stay."""
    last: dict[str, float] = {}
    for key, entry in data.items():
        v = version_of(key)
        if v is not None:
            last[v] = max(last.get(v, 0.0), _written(entry))
    ranked = sorted(last, key=lambda v: (v != first, v != _VERSIONS, -last[v], v))
    keep = set(ranked[:kept])
    return {k: e for k, e in data.items() if version_of(k) in keep or version_of(k) is None}


def _remove_stale_temporaries(d: str) -> None:
    """Remove the temporary files of writers killed in mid-write (called with the lock
    held: a live writer's exists only while it holds the lock). One that cannot be removed
    (another user's, in a folder whose sticky bit keeps it) stays: the write goes on."""
    with contextlib.suppress(OSError):
        names = os.listdir(d)
        for name in names:
            if name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(d, name))


def put(key: str, value: dict) -> None:
    """Add or replace one entry, stamped with the time where it is a dict with a versioned
    key (:data:`WRITTEN`), and drop the entries of versions past ``DITRON_CACHE_VERSIONS``
    (:func:`prune`; ``SettingsError`` before anything is written where that setting cannot
    be read). The read-modify-write holds the lock, so no other process's entry written
    meanwhile is lost (unless its version is one of those dropped)."""
    kept = versions_kept()
    d = cache_dir()
    path = os.path.join(d, FILE)
    if isinstance(value, dict) and version_of(key) is not None:
        value = {**value, WRITTEN: round(time.time(), 3)}
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
            data = prune(data, kept, version_of(key))
            _remove_stale_temporaries(d)
            # a plain file's mode (the umask's), not mkstemp's 0600: a cache shared by
            # several users, or tuned under another one, stays readable to them
            tmp = os.path.join(d, f"{_TMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
                                  f"{_TMP_SUFFIX}")
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
