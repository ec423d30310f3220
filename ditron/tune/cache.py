"""On-disk cache of tuned decisions: one JSON file in ``DITRON_CACHE_DIR`` or ~/.cache/ditron.

Keys name everything a decision depends on: op, shapes, dtype, world size, device name.
Writes are atomic (temporary file + rename), so concurrent ranks never read a torn file.
"""

from __future__ import annotations

import json
import os
import tempfile

FILE = "tune.json"


def cache_dir() -> str:
    return os.environ.get("DITRON_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "ditron")


def make_key(op: str, shape: tuple[int, ...], dtype: str, world_size: int,
             device_name: str) -> str:
    return f"{op}|{'x'.join(str(s) for s in shape)}|{dtype}|w{world_size}|{device_name}"


def load() -> dict:
    path = os.path.join(cache_dir(), FILE)
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def get(key: str) -> dict | None:
    return load().get(key)


def put(key: str, value: dict) -> None:
    d = cache_dir()
    os.makedirs(d, exist_ok=True)
    data = load()
    data[key] = value
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tune-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(d, FILE))
