"""CUDA stream memory operations: write or wait on a 64-bit signal in stream order, without a
kernel launch (the driver's ``cuStreamWriteValue64`` / ``cuStreamWaitValue64``), and the
driver's stream-ordered copy between any two mapped addresses (``cuMemcpyAsync``: the copy
engines), issued by raw address for a few microseconds of host time; and the event calls
that order two streams by raw handle (``engines/streams.py``).

They implement the same semantics as the ``notify`` / ``wait`` kernels of the signal protocol
and are what the host-issued paths (copy engine, exchange) use on CUDA when no wait timeout
is set: a write is preceded by a system-scope memory fence of the stream's earlier work
(release), and work queued after a wait starts only once the value is ``>=`` the target
(acquire), all without occupying a compute unit and for ~1 us of host time instead of a
Triton launch. A stream wait cannot time out, so with ``DITRON_WAIT_TIMEOUT`` set the
kernels (which raise with the rank, signal and values seen) are used instead.
``DITRON_STREAM_MEMOPS=0`` turns them off.
"""

from __future__ import annotations

import ctypes

from .config import env_flag

_WAIT_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ
_WRITE_DEFAULT = 0x0  # CU_STREAM_WRITE_VALUE_DEFAULT: a memory fence precedes the write
_ATTR_64_BIT = 122  # CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (CUDA >= 12)

_driver: tuple | None = None
_checked = False
_EVENT_DISABLE_TIMING = 0x2  # CU_EVENT_DISABLE_TIMING
_event_fns: tuple | None = None


def _load() -> tuple | None:
    global _driver, _checked
    if _checked:
        return _driver
    _checked = True
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fns = []
    for name in ("cuStreamWriteValue64_v2", "cuStreamWaitValue64_v2"):
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
        fns.append(fn)
    import torch

    value = ctypes.c_int()
    get_attr = lib.cuDeviceGetAttribute
    if get_attr(ctypes.byref(value), _ATTR_64_BIT, torch.cuda.current_device()) != 0 \
            or value.value == 0:
        return None
    copy = getattr(lib, "cuMemcpyAsync", None)
    if copy is None:
        return None
    copy.restype = ctypes.c_int
    copy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    _driver = (*fns, copy)
    return _driver


_available: bool | None = None


def available() -> bool:
    """Whether this process can use stream memory operations on its current device (and
    ``DITRON_STREAM_MEMOPS`` is not ``0``); decided once per process."""
    global _available
    if _available is None:
        _available = env_flag("DITRON_STREAM_MEMOPS", True) and _load() is not None
    return _available


def _check(code: int, what: str, addr: int, value: int) -> None:
    if code != 0:
        raise RuntimeError(f"ditron: {what}(addr=0x{addr:x}, value={value}) failed with "
                           f"CUresult {code}")


def write_value(stream: int, addr: int, value: int) -> None:
    """After the earlier work of ``stream`` (raw ``cudaStream_t``), store the 64-bit
    ``value`` at device address ``addr`` (local or a peer's mapped address), fenced."""
    write = _load()[0]
    _check(write(stream, addr, value, _WRITE_DEFAULT), "cuStreamWriteValue64", addr, value)


def wait_value(stream: int, addr: int, value: int) -> None:
    """Make later work of ``stream`` wait until the 64-bit signal at ``addr`` is >= ``value``."""
    wait = _load()[1]
    _check(wait(stream, addr, value, _WAIT_GEQ), "cuStreamWaitValue64", addr, value)


def memcpy(stream: int, dst: int, src: int, nbytes: int) -> None:
    """After the earlier work of ``stream``, copy ``nbytes`` from device address ``src`` to
    ``dst`` (local or peer addresses mapped in this process; unified addressing)."""
    copy = _load()[2]
    code = copy(dst, src, nbytes, stream)
    if code != 0:
        raise RuntimeError(f"ditron: cuMemcpyAsync(dst=0x{dst:x}, src=0x{src:x}, "
                           f"bytes={nbytes}) failed with CUresult {code}")


def _events() -> tuple:
    """``(cuEventCreate, cuEventRecord, cuStreamWaitEvent)`` from the driver (loaded once)."""
    global _event_fns
    if _event_fns is None:
        lib = ctypes.CDLL("libcuda.so.1")
        create, record, wait = lib.cuEventCreate, lib.cuEventRecord, lib.cuStreamWaitEvent
        create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        record.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        wait.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
        for fn in (create, record, wait):
            fn.restype = ctypes.c_int
        _event_fns = (create, record, wait)
    return _event_fns


def new_event() -> int:
    """A new CUDA event without timing on the current device (raw handle; never freed:
    callers keep a fixed set)."""
    handle = ctypes.c_void_p()
    code = _events()[0](ctypes.byref(handle), _EVENT_DISABLE_TIMING)
    if code != 0:
        raise RuntimeError(f"ditron: cuEventCreate failed with CUresult {code}")
    return handle.value


def record_event(event: int, stream: int) -> None:
    """Record ``event`` at the current end of ``stream``'s queue."""
    code = _events()[1](event, stream)
    if code != 0:
        raise RuntimeError(f"ditron: cuEventRecord failed with CUresult {code}")


def wait_event(stream: int, event: int) -> None:
    """Make later work of ``stream`` wait for the last record of ``event``."""
    code = _events()[2](stream, event, 0)
    if code != 0:
        raise RuntimeError(f"ditron: cuStreamWaitEvent failed with CUresult {code}")


_capture_info: object | None = None


def capture_id(stream: int) -> int | None:
    """The id of the CUDA-graph capture that ``stream`` (raw handle) is in: unique per
    capture within the process (``cuStreamGetCaptureInfo``); ``None`` when it is not
    capturing or the driver call is unavailable."""
    global _capture_info
    if _capture_info is None:
        _capture_info = False
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            return None
        # the first three parameters are the same in every version; the later (optional)
        # outputs are passed as NULL
        for name in ("cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3"):
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                               ctypes.POINTER(ctypes.c_uint64)] + [ctypes.c_void_p] * 4
                _capture_info = fn
                break
    if not _capture_info:
        return None
    status, ident = ctypes.c_int(), ctypes.c_uint64()
    code = _capture_info(stream, ctypes.byref(status), ctypes.byref(ident), None, None, None,
                         None)
    if code != 0 or status.value != 1:  # CU_STREAM_CAPTURE_STATUS_ACTIVE
        return None
    return ident.value
