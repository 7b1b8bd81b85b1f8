"""scripts/check_module_state.py: the CI check that keeps kiln.tensor free of mutated module-level state.

Each case writes a small package to a temporary folder and runs the script on it: the findings it must report, and
the ones it must leave alone (constants, locals, allowed state with a reason). The last test runs it on kiln.tensor.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "check_module_state.py"


def _check(tmp_path: Path, modules: dict[str, str]) -> tuple[int, str]:
    package = tmp_path / "src" / "kiln" / "sample"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--list", str(package)], capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ("_cache = {}\ndef f(key):\n    _cache[key] = 1\n", "_cache"),
        ("_seen = set()\ndef f(key):\n    _seen.add(key)\n", "_seen"),
        ("from collections import OrderedDict\n_lru = OrderedDict()\ndef f():\n    _lru.popitem()\n", "_lru"),
        ("import weakref\n_live = weakref.WeakValueDictionary()\ndef f(x):\n    del _live[id(x)]\n", "_live"),
        ("_count = [0]\ndef f():\n    _count[0] += 1\n", "_count"),
        ("_pending: list[int] = []\ndef f(x):\n    _pending.extend((x, x))\n", "_pending"),
        ("import threading\n_local = threading.local()\ndef f():\n    _local.value = 1\n", "_local"),
        ("class State:\n    flag = False\n_state = State()\ndef f():\n    _state.flag = True\n", "_state"),
        ("_hook = None\ndef set_hook(hook):\n    global _hook\n    _hook = hook\n", "_hook"),
    ],
)
def test_mutated_module_state_fails(tmp_path: Path, source: str, name: str) -> None:
    status, output = _check(tmp_path, {"module": source})
    assert status == 1, output
    assert f"'{name}'" in output and "1 finding(s)" in output


def test_mutation_from_another_module_fails(tmp_path: Path) -> None:
    status, output = _check(
        tmp_path,
        {
            "owner": "TABLE = {}\nhook = None\n",
            "user": "from kiln.sample import owner\nfrom kiln.sample.owner import TABLE\n"
            "def f():\n    TABLE['k'] = 1\n    owner.hook = f\n",
        },
    )
    assert status == 1
    assert "'TABLE' is mutated at" in output and "user.py:4" in output
    assert "'kiln.sample.owner.hook' is rebound" in output and "user.py:5" in output


def test_constants_locals_and_allowed_state_pass(tmp_path: Path) -> None:
    status, output = _check(
        tmp_path,
        {
            "module": """
            import threading
            NAMES = {1: "one"}  # read only
            _lock = threading.Lock()

            def f(cache):
                cache["k"] = 1  # a parameter, not the module's
                table = {}
                table["k"] = NAMES[1]
                _lock.acquire()
                return table

            _context = threading.local()  # module-state: per-thread by construction
            def g():
                _context.value = 1
            """,
        },
    )
    assert status == 0, output
    assert "allowed '_context': per-thread by construction" in output and "0 finding(s)" in output


def test_an_allow_comment_needs_a_reason(tmp_path: Path) -> None:
    status, output = _check(tmp_path, {"module": "_cache = {}  # module-state:\ndef f():\n    _cache.clear()\n"})
    assert status == 1 and "'_cache'" in output


def test_kiln_tensor_has_no_unjustified_module_state() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
