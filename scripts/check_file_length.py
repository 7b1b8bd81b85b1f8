"""Fail on any Python source file over 1,000 lines; list those over 600 as a warning."""

import pathlib
import sys

HARD_LIMIT = 1000
SOFT_LIMIT = 600


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    too_long: list[tuple[int, str]] = []
    long: list[tuple[int, str]] = []
    for path in sorted(root.glob("packages/**/*.py")) + sorted(root.glob("benchmarks/**/*.py")):
        count = sum(1 for _ in path.open(encoding="utf-8"))
        rel = str(path.relative_to(root))
        if count > HARD_LIMIT:
            too_long.append((count, rel))
        elif count > SOFT_LIMIT:
            long.append((count, rel))
    for count, rel in long:
        print(f"note: {rel} has {count} lines (over {SOFT_LIMIT}: consider splitting)")
    for count, rel in too_long:
        print(f"error: {rel} has {count} lines (limit {HARD_LIMIT})")
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
