"""Packaging check: build a wheel of every package, install them into a fresh virtual environment,
and import every public module from the installed wheels (a package that forgets a submodule fails)."""

import pathlib
import subprocess
import sys
import tempfile

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
        probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
        # Run outside the repository so nothing can be imported from the source tree.
        result = subprocess.run([python, "-c", probe, *modules], cwd=tmp)
        if result.returncode != 0:
            print("error: a module failed to import from the installed wheels")
            return 1
        print(f"wheels: {len(wheels)} built, {len(modules)} modules imported from a fresh venv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
