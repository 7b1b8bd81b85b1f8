"""scripts/kernel_replay.py's comparison: which kernels changed, which a renderer now refuses (hand-built sources)."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_loading import load_script

replay = load_script("scripts/kernel_replay.py")

OLD = {
    "c/corpus/add": "void add() {}\n",
    "c/corpus/sum": "void sum() {}\n",
    "ptx/corpus/add": "error: ValueError: no fp8\n",
    "llvm/corpus/gone": "define void @gone()\n",
}
NEW = {
    "c/corpus/add": "void add() {}\n",
    "c/corpus/sum": "error: RuntimeError: cannot render\n",  # rendered before, refused now
    "ptx/corpus/add": "error: ValueError: still no fp8\n",  # refused before too: not new
    "llvm/corpus/new": "define void @new()\n",
}


def test_changed_added_and_removed_kernels_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    changed = replay.compare(OLD, NEW, verbose=False)
    assert changed == ["c/corpus/sum", "llvm/corpus/gone", "llvm/corpus/new", "ptx/corpus/add"]
    printed = capsys.readouterr().out.splitlines()
    assert "removed: llvm/corpus/gone" in printed and "added: llvm/corpus/new" in printed


def test_only_kernels_rendered_before_count_as_newly_refused() -> None:
    assert replay.new_errors(OLD, NEW) == ["c/corpus/sum"]
    assert replay.new_errors(NEW, OLD) == []  # refused before and rendered now is a fix


def test_a_tree_without_packages_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=str(tmp_path)):
        replay._use_tree(tmp_path)
