"""How much of torch.Tensor's and tinygrad's Tensor API kiln's Tensor has, and of torch.nn, torch.nn.functional and
torch.optim kiln's `kiln.tensor.nn`, `nn.functional` and `optim` have, from name lists committed as data.

The lists live in scripts/data/: torch_tensor_methods.txt (dir(torch.Tensor): public, not in place),
tinygrad_tensor_names.txt (tinygrad's Tensor and mixins) and tinygrad_exceptions.txt (tinygrad names kiln leaves
out on purpose, each with its reason; tinygrad_pending.txt lists names a change not merged yet adds) and
torch_nn_exceptions.txt (torch.nn / functional / optim names kiln leaves out, each with its reason; those are reported
as excepted, not missing). Prints the counts and the missing names; with --check, exits 1 when kiln has fewer than
--torch-target torch names or misses any tinygrad name that is neither an exception nor pending.

    uv run python scripts/api_coverage.py [--check] [--torch-target 180]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TORCH_TARGET = 180
TORCH_MODULE_FILES = ("torch_nn_names.txt", "torch_nn_functional_names.txt", "torch_optim_names.txt")


def read_names(path: Path) -> list[str]:
    """The names of a list file: one a line, '#' comments and blank lines skipped."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def read_exceptions(path: Path) -> dict[str, str]:
    """name -> reason from 'name: reason' lines; ValueError for a line without a reason."""
    exceptions: dict[str, str] = {}
    for line in read_names(path):
        name, _, reason = line.partition(":")
        if not reason.strip():
            raise ValueError(f"{path.name}: exception {name!r} has no reason (expected 'name: reason')")
        exceptions[name.strip()] = reason.strip()
    return exceptions


def kiln_names() -> set[str]:
    """Public names of kiln's Tensor: class attributes plus the attributes every instance has (grad, ...)."""
    from kiln.tensor import Tensor

    instance = Tensor([1.0])
    return {name for name in set(dir(Tensor)) | set(vars(instance)) | {"grad"} if not name.startswith("_")}


def module_names(module: object, prefix: str = "") -> set[str]:
    """Public names of a kiln module (`prefix` + name), and those of its `lr_scheduler` submodule when it has one."""
    names = {prefix + name for name in dir(module) if not name.startswith("_")}
    scheduler = getattr(module, "lr_scheduler", None)
    if scheduler is not None and prefix == "":
        names |= module_names(scheduler, "lr_scheduler.")
    return names


def torch_module_coverage() -> list[tuple[str, int, int, list[str]]]:
    """(torch module, names kiln has, names torch has, names kiln lacks) for torch.nn, torch.nn.functional and
    torch.optim against kiln.tensor.nn, kiln.tensor.nn.functional and kiln.tensor.optim."""
    from kiln.tensor import nn, optim

    result = []
    for title, data_file, kiln_module in (
        ("torch.nn", "torch_nn_names.txt", nn),
        ("torch.nn.functional", "torch_nn_functional_names.txt", nn.functional),
        ("torch.optim", "torch_optim_names.txt", optim),
    ):
        names = read_names(DATA / data_file)
        have = module_names(kiln_module)
        absent = [name for name in names if name not in have]
        result.append((title, len(names) - len(absent), len(names), absent))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a coverage target is missed")
    parser.add_argument("--torch-target", type=int, default=TORCH_TARGET, help="torch.Tensor names kiln must have")
    args = parser.parse_args(argv)
    have = kiln_names()
    torch_names = read_names(DATA / "torch_tensor_methods.txt")
    tinygrad_names = read_names(DATA / "tinygrad_tensor_names.txt")
    exceptions = read_exceptions(DATA / "tinygrad_exceptions.txt")
    pending_path = DATA / "tinygrad_pending.txt"
    pending = set(read_names(pending_path)) if pending_path.exists() else set()
    unknown = sorted(set(exceptions) - set(tinygrad_names))
    if unknown:
        print(f"error: exceptions name no tinygrad Tensor name: {unknown}")
        return 1
    torch_missing = [name for name in torch_names if name not in have]
    absent = [name for name in tinygrad_names if name not in have and name not in exceptions]
    tinygrad_missing = [name for name in absent if name not in pending]
    still_pending = [name for name in absent if name in pending]
    excepted_present = [name for name in exceptions if name in have]
    torch_count = len(torch_names) - len(torch_missing)
    tinygrad_count = len(tinygrad_names) - len(absent) - len(exceptions) + len(excepted_present)
    print(f"torch.Tensor: kiln has {torch_count} of {len(torch_names)} names (target {args.torch_target})")
    print(f"tinygrad Tensor: kiln has {tinygrad_count} of {len(tinygrad_names)} names, {len(exceptions)} excepted")
    print(f"missing tinygrad names ({len(tinygrad_missing)}): {' '.join(tinygrad_missing) or '-'}")
    waiting = " ".join(still_pending) or "-"
    print(f"pending tinygrad names ({len(still_pending)}, added by a change not merged yet): {waiting}")
    print(f"missing torch.Tensor names ({len(torch_missing)}): {' '.join(torch_missing) or '-'}")
    if excepted_present:
        print(f"note: excepted tinygrad names kiln has anyway: {' '.join(excepted_present)}")
    module_exceptions = read_exceptions(DATA / "torch_nn_exceptions.txt")
    module_names_all = {name for data_file in TORCH_MODULE_FILES for name in read_names(DATA / data_file)}
    unknown_modules = sorted(set(module_exceptions) - module_names_all)
    if unknown_modules:
        print(f"error: torch_nn_exceptions.txt names no torch.nn / functional / optim name: {unknown_modules}")
        return 1
    for title, count, total, absent in torch_module_coverage():
        missing = [name for name in absent if name not in module_exceptions]
        excepted = [name for name in absent if name in module_exceptions]
        print(
            f"{title}: kiln has {count} of {total} names, {len(excepted)} excepted; "
            f"missing ({len(missing)}): {' '.join(missing) or '-'}"
        )
    if args.check and (torch_count < args.torch_target or tinygrad_missing):
        print("coverage check failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
