"""The command lines: `python -m kiln.viz SCRIPT`, `python -m kiln.viz --open PATH`, and `VIZ=1 python SCRIPT`."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .conftest import TRAINING_STEP

URL = re.compile(r"serving (http://127\.0\.0\.1:\d+/)")


def _start(command: list[str], environment: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ if environment is None else environment)
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
    )


def _wait_for_url(process: subprocess.Popen[str], timeout: float = 120.0) -> tuple[str, list[str]]:
    lines: queue.Queue[str | None] = queue.Queue()
    seen: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        line = lines.get(timeout=timeout)
        if line is None:
            raise AssertionError("the process ended without serving:\n" + "".join(seen))
        seen.append(line)
        if match := URL.search(line):
            return match.group(1), seen


def _stop(process: subprocess.Popen[str]) -> int:
    # Ctrl-C to the command itself (a server it started at exit is stopped by it); never a signal to a process group
    process.send_signal(signal.SIGINT)
    try:
        return process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()


def _kernels(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "api/kernels", timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_module_runs_a_script_then_serves_it(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAINING_STEP)
    # options before the script are the viewer's; everything after it is the script's own arguments
    command = [sys.executable, "-m", "kiln.viz", "--port", "0", "--out", str(tmp_path / "out"), str(script), "--x", "1"]
    process = _start(command)
    try:
        url, _ = _wait_for_url(process)
        answer = _kernels(url)
        assert answer["kernels"] and answer["profile"] is True
        assert (tmp_path / "out" / "trace.json").exists() and (tmp_path / "out" / "profile.json").exists()
    finally:
        status = _stop(process)
    assert status == 0


def test_open_serves_saved_files(training_files: Path) -> None:
    process = _start([sys.executable, "-m", "kiln.viz", "--open", str(training_files / "trace.json"), "--port", "0"])
    try:
        url, _ = _wait_for_url(process)
        answer = _kernels(url)
        assert answer["kernels"] and answer["profile"] is False
    finally:
        assert _stop(process) == 0


def test_viz_1_serves_at_exit(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAINING_STEP)
    environment = dict(os.environ, VIZ="1", VIZ_PORT="0", VIZ_OUT=str(tmp_path / "out"))
    process = _start([sys.executable, str(script)], environment)
    try:
        url, output = _wait_for_url(process)
        assert any("wrote" in line and "trace.json" in line for line in output)
        assert _kernels(url)["kernels"]
    finally:
        _stop(process)
    # the viewer inherited VIZ=1: stopping it must neither rewrite the trace it served nor start another server
    time.sleep(1.0)
    pattern = f"kiln.viz --open {tmp_path / 'out'}"
    leftover = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", f"a viewer outlived Ctrl-C: {leftover.stdout}"
    kept = json.loads((tmp_path / "out" / "trace.json").read_text())
    assert any(group["kind"] == "kernel" for group in kept["groups"])


def test_a_corrupt_file_is_served_as_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "trace.json"
    broken.write_text('{"format": "kiln-rewrite-trace", "version": 2, "nodes": [{"op"')
    process = _start([sys.executable, "-m", "kiln.viz", "--open", str(broken), "--port", "0"])
    try:
        url, output = _wait_for_url(process)
        assert any("truncated" in line for line in output)
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(url, timeout=60)
        assert raised.value.code == 500 and b"truncated" in raised.value.read()
    finally:
        assert _stop(process) == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "either a SCRIPT"),
        (["no_such_script.py"], "no such script"),
        (["--open", "x", "--port", "70000"], "--port"),
    ],
)
def test_bad_command_lines_say_what_is_wrong(arguments: list[str], message: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kiln.viz", *arguments], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 2 and message in completed.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, b"nests deeper than 32 levels"),
        (
            json.dumps(
                {
                    "format": "kiln-rewrite-trace",
                    "version": 2,
                    "nodes": [{"op": "SINK", "src": []}],
                    "rewrites": [],
                    "groups": [{"kind": "kernel", "uops": [0], "info": {}}],
                }
            ),
            b"groups[0].uops must be an object, got [0]",
        ),
    ],
    ids=["deep-nesting", "uops-a-list"],
)
def test_open_serves_the_error_page_for_a_malformed_trace(tmp_path: Path, content: str, message: bytes) -> None:
    broken = tmp_path / "trace.json"
    broken.write_text(content)
    process = _start([sys.executable, "-m", "kiln.viz", "--open", str(broken), "--port", "0"])
    try:
        url, output = _wait_for_url(process)
        assert any(message.decode() in line for line in output)
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(url, timeout=60)
        assert raised.value.code == 500 and message in raised.value.read()
    finally:
        assert _stop(process) == 0
