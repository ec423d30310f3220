"""Byte counts (``DITRON_HEAP_SIZE``, ``DITRON_PULL_CHUNK_BYTES``, the command line's sizes):
a binary suffix ``i`` belongs to a unit (``512MiB``); after a bare number it was dropped, so
``12i`` read as 12 bytes."""

from __future__ import annotations

import pytest

from ditron.runtime.config import Settings, SettingsError, parse_bytes


@pytest.mark.parametrize(("text", "value"), [
    ("512M", 512 << 20), ("512MB", 512 << 20), ("512MiB", 512 << 20), ("512mib", 512 << 20),
    ("2Gi", 2 << 30), (" 1 G ", 1 << 30), ("1.5K", 1536), ("100", 100), ("100B", 100),
])
def test_byte_counts_with_units(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["12i", "12iB", "512 i", "1IB", "I", "iB", "Ki", "GI"])
def test_a_binary_suffix_without_a_unit_is_refused(text):
    with pytest.raises(ValueError, match="cannot read a byte count"):
        parse_bytes(text)


def test_heap_size_with_a_stray_suffix_is_named(monkeypatch):
    monkeypatch.setenv("DITRON_HEAP_SIZE", "512i")
    with pytest.raises(SettingsError, match="DITRON_HEAP_SIZE: cannot read a byte count"):
        Settings.from_env("cpu")


@pytest.mark.parametrize(("text", "chunks"), [("1M", 4), ("1048576", 4), ("", 1), ("0", 1)])
def test_pull_chunk_bytes_take_units(monkeypatch, text, chunks):
    """``DITRON_PULL_CHUNK_BYTES`` reads sizes as ``DITRON_HEAP_SIZE`` does (``1M`` was
    refused as not an integer)."""
    from ditron.ops.chunked_exchanges import chunk_bounds

    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", text)
    assert len(chunk_bounds(1 << 20, 4)) == chunks  # 4 MiB of fp32


def test_pull_chunk_bytes_malformed_is_named(monkeypatch):
    from ditron.ops.chunked_exchanges import chunk_bounds

    monkeypatch.setenv("DITRON_PULL_CHUNK_BYTES", "12i")
    with pytest.raises(SettingsError, match="DITRON_PULL_CHUNK_BYTES: cannot read"):
        chunk_bounds(1 << 20, 4)
