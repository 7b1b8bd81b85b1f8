"""scripts/check_import_cycles.py finds exactly the cycles of small module trees built here (brute-force oracle)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from script_loading import load_script

checker = load_script("scripts/check_import_cycles.py")


def write_tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


def components(package: Path, all_imports: bool = True) -> list[list[str]]:
    edges = checker.graph("kiln.pkg", package, all_imports)
    return checker.strongly_connected({m: {t for t, _ in targets} for m, targets in edges.items()})


def test_kinds_of_imports(tmp_path: Path) -> None:
    package = write_tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from kiln.pkg import b\n",
            "b.py": "def f():\n    from kiln.pkg.a import x\n",  # deferred: a cycle by default
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kiln.pkg.d import D\n",
            "d.py": "from .c import something\n",  # relative import
            "e.py": "import kiln.pkg.f\n",
            "f.py": "import os\n",
        },
    )
    assert components(package) == [["kiln.pkg.a", "kiln.pkg.b"], ["kiln.pkg.c", "kiln.pkg.d"]]
    assert components(package, all_imports=False) == []


def brute_force_cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """Components by transitive closure: u and v are together when each reaches the other."""
    nodes = sorted(edges)
    reach = {n: set(edges[n]) for n in nodes}
    changed = True
    while changed:
        changed = False
        for n in nodes:
            extra = set().union(*(reach[m] for m in reach[n])) - reach[n] if reach[n] else set()
            if extra:
                reach[n] |= extra
                changed = True
    groups = set()
    for n in nodes:
        group = frozenset([n] + [m for m in nodes if m in reach[n] and n in reach[m]])
        if len(group) > 1:
            groups.add(group)
    return groups


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs_match_brute_force(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"m{i}" for i in range(rng.randint(2, 9))]
    edges = {n: {m for m in names if m != n and rng.random() < 0.2} for n in names}
    files = {"__init__.py": ""}
    for n, targets in edges.items():
        files[f"{n}.py"] = "".join(f"from kiln.pkg import {t}\n" for t in sorted(targets))
    package = write_tree(tmp_path, files)
    found = {frozenset(c) for c in components(package)}
    want = {frozenset(f"kiln.pkg.{m}" for m in group) for group in brute_force_cycles(edges)}
    assert found == want
    for component in components(package):  # the printed cycle really is a cycle of import edges
        cycle = checker.one_cycle(
            {f"kiln.pkg.{n}": {f"kiln.pkg.{t}" for t in ts} for n, ts in edges.items()}, component
        )
        assert cycle[0] == cycle[-1]
        for a, b in itertools.pairwise(cycle):
            assert b.removeprefix("kiln.pkg.") in edges[a.removeprefix("kiln.pkg.")]


def test_exit_status_and_allow(capsys: pytest.CaptureFixture[str]) -> None:
    # the repository itself: every package is clean, with no --allow (kiln.tensor was the last one, issue 15)
    assert checker.main([]) == 0
    report = capsys.readouterr().out
    assert "ok kiln.codegen" in report and "ok kiln.uops" in report and "ok kiln.tensor" in report
    assert "CYCLE" not in report
    # --allow still accepts a package (one without cycles changes nothing)
    assert checker.main(["--allow", "kiln.tensor"]) == 0
