"""Types of the command line's options (``argparse`` ``type=``): a bad value is a usage
error that names the option, before any rank is launched."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence

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


def positive_float(text: str) -> float:
    """A finite number > 0 (a scale factor)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def int_list(names: Sequence[str] | None = None) -> Callable[[str], list[int]]:
    """A comma list of positive integers: any number of them, or exactly ``names`` (one per
    name, e.g. ``("tokens", "hidden", "ffn")``)."""

    def parse(text: str) -> list[int]:
        parts = [s.strip() for s in text.split(",")]
        if names is not None and len(parts) != len(names):
            raise argparse.ArgumentTypeError(
                f"expected {len(names)} comma-separated integers ({','.join(names)}), "
                f"got {text!r}")
        if not any(parts):
            raise argparse.ArgumentTypeError(f"no integers in {text!r}")
        return [positive_int(s) for s in parts]

    return parse


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """A comma list of names, each one of ``choices`` (at least one)."""

    def parse(text: str) -> list[str]:
        picked = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in picked if s not in choices]
        if unknown or not picked:
            raise argparse.ArgumentTypeError(
                f"a comma list of {', '.join(choices)}; got {text!r}")
        return picked

    return parse


def add_timing_options(parser: argparse.ArgumentParser, warmup: int | str, iters: int | str,
                       rounds: int | None = None) -> None:
    """The benchmarks' ``--warmup`` and ``--iters`` options, and ``--rounds`` when it has a
    default. A default given as text (``"5 on GPU, 1 on CPU"``) leaves the option ``None``
    for the benchmark to choose."""

    def default(value: int | str) -> tuple[int | None, str]:
        return (None, value) if isinstance(value, str) else (value, "%(default)s")

    value, text = default(warmup)
    parser.add_argument("--warmup", type=non_negative_int, default=value,
                        help=f"untimed calls before the first timed one (default {text})")
    value, text = default(iters)
    parser.add_argument("--iters", type=positive_int, default=value,
                        help=f"timed calls (default {text})")
    if rounds is not None:
        parser.add_argument("--rounds", type=positive_int, default=rounds,
                            help="rounds the timed calls are split into, each in a new order "
                                 "(default %(default)s)")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """The destinations of the options ``argv`` names explicitly (not left at their
    defaults), by parsing it again into a namespace whose every field starts as a marker
    (argparse fills in a default only where a field is missing)."""
    unset = object()
    namespace = argparse.Namespace(**{a.dest: unset for a in parser._actions})
    parser.parse_args(argv, namespace=namespace)
    return {dest for dest, value in vars(namespace).items() if value is not unset}


def smoke_defaults(parser: argparse.ArgumentParser, argv: Sequence[str] | None,
                   args: argparse.Namespace, shape: dict[str, object],
                   timing: dict[str, object]) -> None:
    """``--smoke``'s tiny run: set the ``shape`` options (dest -> value), refusing (a usage
    error) any that ``argv`` gives, since the smoke run would ignore them, and the
    ``timing`` options that ``argv`` leaves at their defaults."""
    given = given_options(parser, argv)
    named = sorted(dest for dest in shape if dest in given)
    if named:
        flags = ", ".join("--" + dest.replace("_", "-") for dest in named)
        parser.error(f"--smoke runs its own tiny shapes; {flags} would be ignored (leave "
                     f"{'it' if len(named) == 1 else 'them'} out, or drop --smoke)")
    for dest, value in shape.items():
        setattr(args, dest, value)
    for dest, value in timing.items():
        if dest not in given:
            setattr(args, dest, value)


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
    """A file to write (JSON, a trace's prefix): not a folder, nor a name without a file
    (empty, or ending in a separator: ``results/``); its folder is made now, so a long run
    cannot fail at its end for want of it."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    if not os.path.basename(text):
        raise argparse.ArgumentTypeError(f"{text!r} names no file; give a file name")
    _make_folder(os.path.dirname(os.path.abspath(text)), text)
    return text


def output_dir(text: str) -> str:
    """A folder to write results into: made now (see :func:`output_file`)."""
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder")
    _make_folder(text, text)
    return text
