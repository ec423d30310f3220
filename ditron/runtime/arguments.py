"""Types of the command line's options (``argparse`` ``type=``): a bad value is a usage
error that names the option, before any rank is launched."""

from __future__ import annotations

import argparse
import os

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


def _make_folder(folder: str, text: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot make the folder for {text!r}: "
                                         f"{exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write into {folder!r}")


def output_file(text: str) -> str:
    """A file to write (JSON, a trace's prefix): not a folder; its folder is made now, so a
    long run cannot fail at its end for want of it."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    _make_folder(os.path.dirname(os.path.abspath(text)), text)
    return text


def output_dir(text: str) -> str:
    """A folder to write results into: made now (see :func:`output_file`)."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    _make_folder(text, text)
    return text
