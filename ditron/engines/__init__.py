"""Transfer engines (device level): see ``base.py`` for the interface."""

from .base import Engine, Signal, Transfer, get_engine, register_engine

__all__ = ["Engine", "Signal", "Transfer", "get_engine", "register_engine"]
