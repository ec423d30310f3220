"""One host all-gather format for every check that ranks make together before a collective
call: :mod:`.agreement`'s checks, the heap's allocations and all_to_all's split sizes.

Each rank sends one row of ``4 + 2 W`` int64 in a tensor all-gather over the host group:
digests of its call's name (with its field names) and of its field values, a kind (``OK``,
or ``REFUSED`` / ``PROBLEM`` / ``FIELDS``: see below) and up to ``1 + 2 W`` integers of
payload. The pickled ``(what, names, values)`` of every rank follow in a second gather only
when the rows ask for them: a digest that differs between ranks, or a kind other than
``OK`` on any rank. Every rank sees the same rows, so all make the second gather or none;
a field value that cannot be pickled travels as :class:`Unsent` (pickling it raised on its
rank alone, before the gather, leaving the others waiting: gloo aborted them).

One row size for every check means that two ranks in different checks (one in all_to_all's
gather, one in another op's agreement) still exchange rows of equal size, see that their
calls differ and raise; gathers of different sizes abort the process in gloo. The common
case, ranks that agree, costs one small tensor gather (no pickling).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

#: row kinds: nothing to tell; the rank refused its own arguments (its values hold the
#: error); the rank found a problem in its data (likewise); the caller wants every rank's
#: values whatever the digests say
OK, REFUSED, PROBLEM, FIELDS = 0, 1, 2, 3
#: row words before the payload: call digest, kind, values digest, payload length
_HEAD = 4


def payload_width(world_size: int) -> int:
    """How many integers of payload a row carries (all_to_all's kind and two splits lists)."""
    return 1 + 2 * world_size


def digest(value: object) -> int:
    """A 64-bit digest of ``value`` that is the same in every process for equal values of
    the kinds checks pass (ints, floats, strings, None, bools, dtypes, enums, dataclasses,
    and tuples / lists / sets / dicts of them): their ``repr``, sets and dicts sorted; a
    tensor or NumPy array by its dtype, shape and every element's bytes (their ``repr``
    rounds and elides elements: arrays that differed past it digested alike, and so
    agreed)."""
    text = _canonical(value).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little", signed=True)


def _canonical(value: object) -> str:
    if isinstance(value, (tuple, list)):  # torch.Size too
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return _elements(value)
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_canonical(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{_canonical(k)}:{_canonical(v)}"
                                     for k, v in value.items())) + "}"
    return f"{type(value).__name__}:{value!r}"


def _elements(array: torch.Tensor | np.ndarray) -> str:
    """A tensor or array as its type, dtype, shape and a hash of its elements' bytes (a
    tensor without readable bytes, meta or sparse: its ``repr``; an array of objects: its
    elements, each as :func:`_canonical` writes it)."""
    name = type(array).__name__
    if isinstance(array, np.ndarray):
        if array.dtype.hasobject:
            return f"{name}:{array.shape}:{_canonical(array.tolist())}"
        data = np.ascontiguousarray(array).tobytes()
    else:
        try:
            flat = array.detach().resolve_conj().resolve_neg().reshape(-1)
            data = flat.cpu().contiguous().view(torch.uint8).numpy().tobytes()
        except (RuntimeError, NotImplementedError, TypeError):  # no bytes to read
            return f"{name}:{array!r}"
    return (f"{name}:{array.dtype}:{tuple(array.shape)}:"
            f"{hashlib.blake2b(data, digest_size=16).hexdigest()}")


@dataclasses.dataclass(frozen=True)
class Unsent:
    """A field value that its rank could not pickle, in its place in ``Rows.calls``:
    its ``repr`` and the pickling ``error``."""

    text: str
    error: str

    def __repr__(self) -> str:
        return f"<unpicklable {self.text} ({self.error})>"


def _sendable(values: tuple) -> tuple:
    """``values``, each that cannot be pickled replaced by an :class:`Unsent` (pickled
    twice where they can: the second gather is the slow path anyway)."""
    try:
        pickle.dumps(values)
        return values
    except Exception:  # noqa: BLE001 - anything pickling raises: told to every rank
        pass
    out = []
    for v in values:
        try:
            pickle.dumps(v)
            out.append(v)
        except Exception as exc:  # noqa: BLE001 - as above
            out.append(Unsent(_short(v), f"{type(exc).__name__}: {exc}"))
    return tuple(out)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclasses.dataclass(frozen=True)
class Rows:
    """What :func:`exchange` gathered, per rank: ``kinds``, ``payloads`` and, where the rows
    asked for them, ``calls``: each rank's ``(what, names, values)`` (else ``None``: every
    rank's call and values digest equal this rank's and every kind is ``OK``)."""

    kinds: list[int]
    payloads: list[list[int]]
    calls: list[tuple[str, tuple[str, ...], tuple]] | None

    def different_calls(self) -> str | None:
        """The lines naming each rank's call where ranks are in different calls (another
        call's name or field names: with its field names where the names alone do not
        tell the calls apart), else ``None``."""
        if self.calls is None or all(c[:2] == self.calls[0][:2] for c in self.calls):
            return None
        fields = len({c[0] for c in self.calls}) < len({c[:2] for c in self.calls})
        return "\n".join(f"  rank {r}: {c[0]}" + (f" (fields: {', '.join(c[1]) or 'none'})"
                                                  if fields else "")
                         for r, c in enumerate(self.calls))

    def unsent(self) -> str | None:
        """The lines naming each rank's field values that could not be sent
        (:class:`Unsent`), else ``None``."""
        if self.calls is None:
            return None
        lines = [f"  rank {r}: {n}={v!r}" for r, (_, names, values) in enumerate(self.calls)
                 for n, v in zip(names, values, strict=False) if isinstance(v, Unsent)]
        return "\n".join(lines) or None


def exchange(group, what: str, names: tuple[str, ...], values: tuple, kind: int = OK,
             payload: Sequence[int] = ()) -> Rows:
    """This rank's row for call ``what`` with fields ``names`` = ``values`` and its
    ``payload`` (at most :func:`payload_width` ints), exchanged with every rank of the host
    ``group``; the call itself gathered too when the rows ask for it (module docstring)."""
    W = dist.get_world_size(group)
    width = payload_width(W)
    if len(payload) > width:
        raise ValueError(f"host_rows.exchange: a payload of {len(payload)} ints, at most "
                         f"{width} fit")
    row = torch.tensor([digest((what, names)), kind, digest(values), len(payload),
                        *payload, *[0] * (width - len(payload))], dtype=torch.int64,
                       device="cpu")  # the host group's, whatever the default device
    rows = [torch.empty_like(row) for _ in range(W)]
    dist.all_gather(rows, row, group=group)
    table = [r.tolist() for r in rows]
    calls = None
    if any(t[0] != table[0][0] or t[2] != table[0][2] or t[1] != OK for t in table):
        calls = [None] * W
        dist.all_gather_object(calls, (what, names, _sendable(values)), group=group)
    return Rows([t[1] for t in table], [t[_HEAD:_HEAD + t[3]] for t in table], calls)


__all__ = ["FIELDS", "OK", "PROBLEM", "REFUSED", "Rows", "Unsent", "digest", "exchange",
           "payload_width"]
