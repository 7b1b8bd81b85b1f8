"""`ProcessOnce`: made once by the first call that succeeds, whatever the threads; a failure is not kept."""

from __future__ import annotations

import threading
import time

import pytest

from kiln.renderers import ProcessOnce


def test_concurrent_first_calls_make_the_value_once() -> None:
    calls: list[int] = []

    def make() -> list[int]:
        calls.append(1)
        time.sleep(0.05)  # long enough for the other threads to arrive while it is being made
        return [len(calls)]

    once = ProcessOnce(make)
    results: list[list[int]] = []
    threads = [threading.Thread(target=lambda: results.append(once())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 8 and all(result is results[0] for result in results)


def test_a_failed_call_keeps_nothing_and_the_next_tries_again() -> None:
    attempts: list[int] = []

    def make() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("library not found")

    once = ProcessOnce(make)
    with pytest.raises(OSError, match="library not found"):
        once()
    assert once() is None and once() is None  # None is a value like any other: made on the second try, kept
    assert len(attempts) == 2


def test_keeps_the_wrapped_functions_name_and_docstring() -> None:
    def library() -> int:
        """The library."""
        return 1

    once = ProcessOnce(library)
    assert (once.__name__, once.__doc__) == ("library", "The library.")  # type: ignore[attr-defined]
