"""The CPU backend's process preparation and heap mapping: what it refuses, before any
segment is mapped or any kernel runs."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import torch

import ditron
from ditron.runtime.backends import Topology, cpu


def _shm_with_free(monkeypatch, free: int) -> None:
    """``os.statvfs`` reporting ``free`` bytes available in ``/dev/shm``."""
    real = os.statvfs

    class Fake:
        f_frsize = 4096
        f_bavail = free // 4096

    monkeypatch.setattr(os, "statvfs", lambda p: Fake() if p == cpu.SHM_DIR else real(p))


def test_heaps_that_do_not_fit_in_shared_memory_are_refused(monkeypatch):
    """The segments are sparse files: heaps larger than ``/dev/shm`` mapped, and a rank
    died of SIGBUS ("Bus error", no Python error) once it touched pages past what the
    file system holds (a Docker container has 64 MB by default, the heap 1 GiB a rank).
    The node's heaps together must fit: four of 1 MiB in 3 MiB are refused, naming the
    setting and the free space, and no segment is left."""
    nbytes = 1 << 20
    _shm_with_free(monkeypatch, 3 * nbytes)
    job = f"room-test-{uuid.uuid4().hex[:12]}"  # its own segments: not a neighbour's
    with pytest.raises(RuntimeError, match=r"the symmetric heaps of the node's 4 ranks "
                                           r"\(4 x 1048576 bytes: DITRON_HEAP_SIZE.*"
                                           r"do not fit in /dev/shm, which has 3145728 bytes"):
        cpu.CpuBackend().map_heap(nbytes, Topology(1, 4, 4), None, job)
    # only this job's segments: another test (a pytest-xdist worker beside this one) may
    # create and remove its own meanwhile
    prefix = os.path.basename(cpu.segment_path(job, 0))[:-1]
    assert [f for f in os.listdir(cpu.SHM_DIR) if f.startswith(prefix)] == []


def _init_with_little_room() -> tuple[str, bool, bool]:
    """In a launched rank: a new world whose heap ``/dev/shm`` cannot hold is refused at
    ``init`` (and leaves no process group); one that fits is made."""
    ditron.shutdown()
    os.environ.pop("DITRON_INIT_METHOD")  # env:// on a free port: the file store is used once
    with pytest.MonkeyPatch.context() as mp:
        _shm_with_free(mp, 32 << 20)
        with pytest.raises(RuntimeError) as info:
            ditron.init(heap_size="64M")
        left = ditron.is_initialized()
        ditron.init(heap_size="16M")
    made = bool((ditron.zeros(4 << 20, torch.uint8) == 0).all())  # 4 MiB, touched
    ditron.shutdown()
    return str(info.value), left, made


def test_init_refuses_a_heap_the_machine_cannot_back():
    message, left, made = ditron.launch(_init_with_little_room, 1, backend="cpu")[0]
    assert "do not fit in /dev/shm, which has 33554432 bytes free" in message, message
    assert not left and made


_LATE_CPU = """
import ditron
try:
    ditron.init("cpu")
    ditron.barrier()
    print("ran")
except Exception as e:
    print(type(e).__name__, e)
finally:
    ditron.shutdown()
"""


def test_cpu_init_in_a_process_imported_as_cuda_is_refused_clearly():
    """A process that imported ditron with the cuda backend as its default (a GPU host
    without ``DITRON_BACKEND``; here ``DITRON_BACKEND=cuda``) holds GPU kernels: Triton
    chose when they were decorated. ``ditron.init("cpu")`` there (torchrun with gloo on a
    GPU laptop) used to succeed, and the first kernel, the barrier's, failed deep in
    Triton ("0 active drivers" without a GPU). ``init`` now says what to set."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["DITRON_BACKEND"] = "cuda"
    run = subprocess.run([sys.executable, "-c", _LATE_CPU], capture_output=True, text=True,
                         timeout=300, env=env)
    out = run.stdout.strip()
    assert out.startswith("RuntimeError ditron cpu backend: this process imported ditron "
                          "with the cuda backend as its default"), (out, run.stderr[-2000:])
    assert "Set DITRON_BACKEND=cpu before starting Python" in out
