"""``--out`` paths are checked when the command line is parsed: a path that names no file
(empty, or a folder-like ``results/``) is a usage error, not a run whose results are lost
at its end (``results/`` raised IsADirectoryError after the whole benchmark; an empty name
wrote nothing, silently)."""

from __future__ import annotations

import argparse
import os

import pytest

from ditron.runtime.arguments import output_dir, output_file


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--out", type=output_file)
    return parser


@pytest.mark.parametrize("name", ["", "results/", "deep/results/"])
def test_a_path_naming_no_file_is_a_usage_error(name, tmp_path, capsys):
    text = name and str(tmp_path / name) + ("/" if name.endswith("/") else "")
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["--out", text])
    assert info.value.code == 2
    assert f"argument --out: {text!r} names no file; give a file name" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []  # no folder made for it either


def test_a_file_path_is_taken_and_its_folder_made(tmp_path):
    target = tmp_path / "new" / "rows.json"
    assert _parser().parse_args(["--out", str(target)]).out == str(target)
    assert (tmp_path / "new").is_dir() and not target.exists()
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder; give a file name"):
        output_file(str(tmp_path))
    assert output_dir(str(tmp_path / "made") + "/") == str(tmp_path / "made") + "/"
    assert (tmp_path / "made").is_dir()
