"""Process-wide settings, read from ``DITRON_*`` environment variables at ``ditron.init``.

- ``DITRON_BACKEND``: ``cpu`` or ``cuda``; default ``cuda`` when a GPU is visible.
- ``DITRON_HEAP_SIZE``: symmetric heap bytes per rank (``512M``, ``2G``); 1G on CPU, 2G on CUDA.
- ``DITRON_WAIT_TIMEOUT``: seconds a device ``wait`` spins before it raises (0: forever);
  120 on CPU, 0 on CUDA.
- ``DITRON_LOCAL_WORLD_SIZE``: ranks per node of the job; a smaller value simulates nodes on CPU.
- ``DITRON_POISON``: fill fresh symmetric memory with 0xFF bytes (NaN for floats); off.
- ``DITRON_LAUNCH_TIMEOUT``: seconds ``ditron.launch`` waits, once every rank has started,
  for ranks to return before it names the stuck ones and kills them (0: forever). With a
  timeout, start-up (spawn, CUDA context, rendezvous) is bounded separately by
  ``max(timeout, 300 s)``; without one, it is not bounded either.
- ``DITRON_CHECK_CALLS``: check on every collective call that the ranks agree on it (one
  host gather per call), not only on the first call of each signature; by default on in
  debug mode (a wait timeout at ``init``: the CPU backend's default), off otherwise.
  It catches a rank whose shapes change without the others', or that refuses its
  arguments alone (``runtime/agreement.py``).
"""

from __future__ import annotations

import dataclasses
import math
import os

from .integers import as_int, check_int

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
BACKENDS = ("cpu", "cuda")


class SettingsError(ValueError):
    """A ``DITRON_*`` variable or ``ditron.init`` keyword that cannot be read (the message
    names it)."""


#: the largest byte count read (2**62: past it, sizes overflow the C types they reach)
MAX_BYTES = 1 << 62
#: the longest timeout read, in seconds (about 11.6 days; timers take milliseconds as C
#: ints or days as 32-bit ints past it)
MAX_SECONDS = 1e6


def parse_bytes(text: str | int) -> int:
    """``"512M"`` -> 536870912; plain integers are bytes. A unit (``K``, ``M``, ``G``,
    ``T``, powers of 1024) may be followed by ``B``, ``I`` or ``IB`` (``512MiB``); a number
    by ``B``; nothing else (``"12i"`` was read as 12 bytes)."""
    value = as_int(text)
    if value is None:
        if not isinstance(text, str):
            raise ValueError(f"a byte count is an int or a string like '512M', got {text!r}")
        s = text.strip().upper().removesuffix("B")
        if s[-2:-1] in _UNITS:
            s = s.removesuffix("I")
        scale = _UNITS.get(s[-1:], 1)
        number = s[:-1] if s[-1:] in _UNITS else s
        try:
            value = int(float(number) * scale)
        except (ValueError, OverflowError):  # not a number, nan, inf
            raise ValueError(f"cannot read a byte count from {text!r} (try '512M' or "
                             f"'2G')") from None
    if value <= 0:
        raise ValueError(f"byte count must be positive, got {text!r}")
    if value > MAX_BYTES:
        raise ValueError(f"byte count {text!r} is too large (at most {MAX_BYTES})")
    return value


def env_flag(name: str, default: bool = False) -> bool:
    """The on/off environment variable ``name``: ``default`` when unset or empty, off when
    ``0``, ``false``, ``off`` or ``no`` (any case), on otherwise."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    return value not in ("0", "false", "off", "no")


def env_switch(name: str) -> bool | None:
    """The environment variable ``name`` that forces a choice either way: ``None`` (the
    caller's default) when unset or empty, ``False`` for ``0``, ``false``, ``off`` or
    ``no``, ``True`` for ``1``, ``true``, ``on`` or ``yes`` (any case); ``SettingsError``
    naming it otherwise."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value in ("0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise SettingsError(f"{name} must be 0 or 1 (or off / on), got {os.environ[name]!r}")


def env_int(name: str, default: int, minimum: int = 0) -> int:
    """The integer environment variable ``name``: ``default`` when unset or empty;
    ``SettingsError`` naming it when it is not an integer >= ``minimum``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise SettingsError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return number


def env_bytes(name: str, default: int) -> int:
    """The byte-count environment variable ``name`` (``"64M"``, ``"1048576"``: as
    :func:`parse_bytes` reads it); ``default`` when unset, empty or ``0``;
    ``SettingsError`` naming it otherwise."""
    value = os.environ.get(name, "").strip()
    if not value or value == "0":
        return default
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise SettingsError(f"{name}: {exc}") from None


def env_float(name: str, default: float) -> float:
    """The number environment variable ``name`` (``default`` when unset or empty);
    ``SettingsError`` naming it when it is not a finite number."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise SettingsError(f"{name} must be a number, got {value!r}")
    return number


def check_backend(name: object) -> str:
    """``name`` (a string, any case) as a backend's name; ``SettingsError`` for any other
    value (a ``torch.device`` too)."""
    if not isinstance(name, str) or name.lower() not in BACKENDS:
        raise SettingsError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name.lower()


def default_backend() -> str:
    """The backend used when none is named: ``DITRON_BACKEND``, else by hardware."""
    env = os.environ.get("DITRON_BACKEND")
    if env:
        try:
            return check_backend(env)
        except SettingsError as e:
            raise SettingsError(f"DITRON_BACKEND: {e}") from None
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Settings fixed for a rank process once ``ditron.init`` has run."""

    backend: str
    heap_size: int
    wait_timeout: float
    local_world_size: int | None = None
    poison: bool = False
    launch_timeout: float = 0.0
    #: compare every collective call across ranks, not only each new signature
    #: (``DITRON_CHECK_CALLS``; by default on in debug mode, ``wait_timeout > 0``)
    check_calls: bool = False

    @classmethod
    def from_env(cls, backend: str | None = None, *, heap_size: int | str | None = None,
                 wait_timeout: float | None = None,
                 local_world_size: int | None = None) -> Settings:
        """The settings of ``DITRON_*`` variables, with ``ditron.init``'s keywords (``None``:
        not given) taking precedence. A malformed value raises ``SettingsError`` naming the
        variable or keyword."""
        backend = check_backend(backend) if backend else default_backend()
        env = os.environ
        overrides = {"heap_size": heap_size, "wait_timeout": wait_timeout,
                     "local_world_size": local_world_size}

        def given(key: str, var: str, default: str | None) -> tuple[object, str]:
            if overrides[key] is not None:
                return overrides[key], f"ditron.init({key}=...)"
            return env.get(var) or default, var

        heap, heap_src = given("heap_size", "DITRON_HEAP_SIZE", "1G" if backend == "cpu" else "2G")
        timeout, timeout_src = given("wait_timeout", "DITRON_WAIT_TIMEOUT",
                                     "120" if backend == "cpu" else "0")
        lws, lws_src = given("local_world_size", "DITRON_LOCAL_WORLD_SIZE", None)
        try:
            heap_size = parse_bytes(heap)
        except ValueError as e:
            raise SettingsError(f"{heap_src}: {e}") from None
        wait_timeout = _seconds(timeout, timeout_src)
        return cls(
            backend=backend,
            heap_size=heap_size,
            wait_timeout=wait_timeout,
            local_world_size=None if lws is None else _positive_int(lws, lws_src),
            poison=env_flag("DITRON_POISON"),
            launch_timeout=_seconds(env.get("DITRON_LAUNCH_TIMEOUT") or "0",
                                    "DITRON_LAUNCH_TIMEOUT"),
            check_calls=env_flag("DITRON_CHECK_CALLS", default=wait_timeout > 0),
        )


def _seconds(value: object, source: str) -> float:
    """A timeout in seconds: a number in ``[0, MAX_SECONDS]`` (0: no limit); not a
    ``bool`` (``wait_timeout=True`` is a mistake, not one second)."""
    try:
        seconds = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not 0 <= seconds <= MAX_SECONDS:  # also refuses nan and inf
        raise SettingsError(f"{source} must be a number of seconds in [0, {MAX_SECONDS:g}] "
                            f"(0: no limit), got {value!r}")
    return seconds


def _positive_int(value: object, source: str) -> int:
    """A positive int, from a variable's text or a keyword's value."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            pass
    return check_int(value, source, 1, error=SettingsError)
