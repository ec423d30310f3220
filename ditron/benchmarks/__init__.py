"""Benchmarks run by ``ditron bench NAME`` (one module per NAME)."""
