"""Buffer reuse within a schedule: temporaries whose lifetimes do not overlap share one block of memory."""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tensor.schedule.items import BufferRef, BufferSource, BufferSpecification, CopyStep, KernelStep, Step


def _refs(step: Step) -> tuple[BufferRef, ...]:
    if isinstance(step, KernelStep):
        return step.buffers
    assert isinstance(step, CopyStep)
    return (step.destination, step.source)


def plan_temporaries(
    steps: Sequence[Step], temporaries: Sequence[BufferSpecification]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(slot of each temporary, bytes of each slot): a temporary reuses the slot of one whose last use came before
    its first use, on the same device (best fit by size; a slot grows to its largest tenant)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for position, step in enumerate(steps):
        for ref in _refs(step):
            if ref.source is BufferSource.TEMPORARY:
                first.setdefault(ref.number, position)
                last[ref.number] = position
    slot_of = [-1] * len(temporaries)
    slot_bytes: list[int] = []
    slot_device: list[str] = []
    slot_free_after: list[int] = []  # the step after which the slot's current tenant is dead
    for number in sorted(range(len(temporaries)), key=lambda n: (first.get(n, -1), n)):
        spec = temporaries[number]
        start = first.get(number, -1)
        candidates = [
            slot
            for slot in range(len(slot_bytes))
            if slot_device[slot] == spec.device and slot_free_after[slot] < start
        ]
        if candidates:
            fitting = [slot for slot in candidates if slot_bytes[slot] >= spec.nbytes]
            slot = (
                min(fitting, key=lambda s: slot_bytes[s]) if fitting else max(candidates, key=lambda s: slot_bytes[s])
            )
            slot_bytes[slot] = max(slot_bytes[slot], spec.nbytes)
        else:
            slot = len(slot_bytes)
            slot_bytes.append(spec.nbytes)
            slot_device.append(spec.device)
            slot_free_after.append(-1)
        slot_of[number] = slot
        slot_free_after[slot] = last.get(number, len(steps))
    return tuple(slot_of), tuple(slot_bytes)
