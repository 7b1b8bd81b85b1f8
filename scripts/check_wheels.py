"""Packaging check: build a wheel of every package, install them into a fresh virtual environment,
and import every public module from the installed wheels (a package that forgets a submodule fails).

The wheels are installed without their optional extras: a module may fail to import only with a
ModuleNotFoundError naming a package that one of its own package's extras declares (kiln.tensor.llm without
`kiln-tensor[llm]`), and that is listed, not failed."""

import json
import pathlib
import re
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def modules_of(package_dir: pathlib.Path) -> list[str]:
    """Every importable module under package_dir/src, as dotted names (private `_x` modules included)."""
    src = package_dir / "src"
    names = []
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts))
    return names


def extra_requirements(package_dir: pathlib.Path) -> set[str]:
    """The import names of the distributions the package's optional extras declare (lower-case, `-` as `_`)."""
    project = tomllib.loads((package_dir / "pyproject.toml").read_text())["project"]
    names = set()
    for requirements in project.get("optional-dependencies", {}).values():
        for requirement in requirements:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement)
            if name is not None and not name.group().startswith("kiln"):
                names.add(name.group().lower().replace("-", "_"))
    return names


PROBE = """import collections, importlib, json, sys
allowed = json.loads(sys.argv[1])
needing = collections.defaultdict(list)
for module in sys.argv[2:]:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing not in allowed.get(module.split(".")[1], []):
            raise
        needing[missing].append(module)
for missing, modules in sorted(needing.items()):
    print(f"  {len(modules)} modules need {missing}, an optional extra of their package (e.g. {modules[0]})")
"""


def main() -> int:
    packages = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
    with tempfile.TemporaryDirectory(prefix="kiln-wheels-") as tmp:
        dist = pathlib.Path(tmp) / "dist"
        subprocess.run(["uv", "build", "--all-packages", "--wheel", "-q", "-o", str(dist)], cwd=ROOT, check=True)
        wheels = sorted(str(w) for w in dist.glob("*.whl"))
        if len(wheels) != len(packages):
            print(f"error: built {len(wheels)} wheels for {len(packages)} packages: {wheels}")
            return 1
        venv = pathlib.Path(tmp) / "venv"
        subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run(["uv", "pip", "install", "-q", "--python", python, *wheels], check=True)
        modules = [m for p in packages for m in modules_of(p)]
        # kiln.<name> -> the import names its package's extras bring
        allowed = {}
        for package in packages:
            for module in modules_of(package):
                if module.count(".") == 1:
                    allowed[module.split(".")[1]] = sorted(extra_requirements(package))
        # Run outside the repository so nothing can be imported from the source tree.
        result = subprocess.run([python, "-c", PROBE, json.dumps(allowed), *modules], cwd=tmp)
        if result.returncode != 0:
            print("error: a module failed to import from the installed wheels")
            return 1
        print(f"wheels: {len(wheels)} built, {len(modules)} modules probed in a fresh venv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
