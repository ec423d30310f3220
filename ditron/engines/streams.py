"""Where an engine's side stream starts (CUDA): after the issuing stream's queue so far, or
after a mark recorded in it earlier (``Engine.mark`` / ``Engine.issue(..., since=)``)."""

from __future__ import annotations

import torch


def mark_current() -> torch.cuda.Event:
    """An event recorded now on the current stream (also inside a graph capture)."""
    event = torch.cuda.Event()
    event.record()
    return event


def start_after(side: torch.cuda.Stream, since: torch.cuda.Event | None) -> None:
    """Make ``side`` wait for ``since``, or for everything queued on the current stream."""
    if since is None:
        side.wait_stream(torch.cuda.current_stream())
    else:
        side.wait_event(since)
