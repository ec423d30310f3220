"""Test configuration: the backend under test and the GPU marker.

``pytest`` runs on the CPU backend. ``pytest --ditron-backend cuda`` reruns the same
multi-rank tests on GPUs (ranks share GPUs round-robin when there are more ranks than GPUs).
"""

from __future__ import annotations

import os

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--ditron-backend", default=os.environ.get("DITRON_TEST_BACKEND", "cpu"),
                     choices=["cpu", "cuda"], help="backend the multi-rank tests run on")


def pytest_configure(config):
    # A test whose ranks stop making progress fails with their names instead of hanging.
    os.environ.setdefault("DITRON_LAUNCH_TIMEOUT", "300")
    os.environ["DITRON_TEST_BACKEND"] = config.getoption("--ditron-backend")
    # The tests that run kernels in this process (not in launched ranks) are interpreter
    # tests, which ``import ditron`` arranges for the CPU backend only; on a host with GPUs
    # too. Ranks launched with backend="cuda" start as the CUDA backend regardless.
    os.environ.setdefault("DITRON_BACKEND", "cpu")


def pytest_xdist_auto_num_workers(config):
    """Workers for ``-n auto`` (pytest-xdist): one per CPU, at most 8, since every
    multi-rank test starts its own rank processes and more workers only oversubscribe the
    cores (on 2 cores, 2 workers ran tests/runtime 1.37x faster than one, 4 workers 1.15x).
    None on a host with a GPU: its GPU-marked and ``--ditron-backend cuda`` tests share the
    GPUs and time themselves. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if torch.cuda.is_available():
        return 0
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def backend(request) -> str:
    name = request.config.getoption("--ditron-backend")
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return name


@pytest.fixture(autouse=True)
def _no_leaks():
    """Every test must leave no rank process and no shared-memory segment behind. Segments
    that existed before it belong to someone else, and so may new ones that go away within
    seconds: another test session on the machine starting ranks (a segment lives until
    every rank of its job has mapped it)."""
    import multiprocessing
    import time

    def ditron_segments() -> set[str]:
        return {f for f in os.listdir("/dev/shm") if f.startswith("ditron-")}

    before = ditron_segments()
    yield
    leftover = [p for p in multiprocessing.active_children() if p.name.startswith("ditron-rank")]
    assert not leftover, f"rank processes left running: {leftover}"
    segments = ditron_segments() - before
    deadline = time.monotonic() + 10
    while segments and time.monotonic() < deadline:
        time.sleep(0.5)
        segments &= ditron_segments()
    assert not segments, f"shared-memory segments left behind: {sorted(segments)}"
