"""Profile events and their Chrome trace-event export."""

from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

import pytest

from kiln.runtime import ProfileEvent, Profiler


def test_event_duration_and_trace_form() -> None:
    event = ProfileEvent("CUDA:1", "matmul", "program", 100.5, 130.0, "compute")
    assert event.duration_us == 29.5
    assert event.to_trace_event() == {
        "name": "matmul",
        "cat": "program",
        "ph": "X",
        "ts": 100.5,
        "dur": 29.5,
        "pid": "CUDA:1",
        "tid": "compute",
    }


def test_profiler_collects_from_threads_and_saves_json(tmp_path: Path) -> None:
    profiler = Profiler()

    def record(worker: int) -> None:
        for index in range(100):
            profiler.record(ProfileEvent(f"DEV:{worker}", f"k{index}", "program", index, index + 1.0))

    threads = [threading.Thread(target=record, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(profiler.events) == 400
    for worker in range(4):
        names = [event.name for event in profiler.events if event.device == f"DEV:{worker}"]
        assert names == [f"k{index}" for index in range(100)]
    saved = json.loads(profiler.save(tmp_path / "trace.json").read_text())["traceEvents"]
    timed = [event for event in saved if event["ph"] == "X"]
    assert len(timed) == 400
    # devices are numbered processes and queues numbered threads, named by metadata events
    names = {event["pid"]: event["args"]["name"] for event in saved if event["name"] == "process_name"}
    assert sorted(names.values()) == [f"DEV:{worker}" for worker in range(4)]
    for worker in range(4):
        mine = [event["name"] for event in timed if names[event["pid"]] == f"DEV:{worker}"]
        assert mine == [f"k{index}" for index in range(100)]
    threads = [event for event in saved if event["name"] == "thread_name"]
    assert {event["args"]["name"] for event in threads} == {"compute"} and len(threads) == 4
    profiler.clear()
    assert profiler.events == []


def test_a_failing_save_keeps_the_previous_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiler = Profiler()
    profiler.record(ProfileEvent("DEV:0", "first", "program", 0, 1.0))
    path = profiler.save(tmp_path / "trace.json")
    saved = path.read_bytes()
    profiler.record(ProfileEvent("DEV:0", "second", "program", 1, 2.0))

    def disk_full(*_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        profiler.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == saved
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]
