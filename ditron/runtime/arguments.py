"""Types of the command line's options (``argparse`` ``type=``): a bad value is a usage
error that names the option, before any rank is launched."""

from __future__ import annotations

import argparse

from .config import parse_bytes


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (ranks, iterations, sizes)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (warm-up calls)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {value}")
    return value


def byte_count(text: str) -> int:
    """A positive byte count: ``4096``, ``64K``, ``512M``, ``1G``."""
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def byte_counts(text: str) -> list[int]:
    """A comma list of byte counts: ``4K,1M,1G``."""
    counts = [byte_count(s) for s in text.split(",") if s.strip()]
    if not counts:
        raise argparse.ArgumentTypeError(f"no byte counts in {text!r}")
    return counts
