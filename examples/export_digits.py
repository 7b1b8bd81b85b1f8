"""Export the digits CNN (examples/train_digits.py) as a C library and as a WebGPU page, then build and run the C one.

    uv run python examples/export_digits.py                                  # trains 3 epochs first if needed
    uv run python examples/export_digits.py --checkpoint digits_cnn.safetensors --out build/digits

The model is loaded from the checkpoint (trained and saved there first when it does not exist), exported with
`kiln.tensor.export.export` for a batch of 16 images to OUT/c (digits.c, digits.h, digits.safetensors, main.c,
Makefile) and, when kiln finds a WebGPU adapter, to OUT/webgpu (digits.js, digits.safetensors, index.html). The C
artifact is compiled with the system C compiler and run on test images; its predictions are compared with kiln's.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import numpy as np
from train_digits import make_model, train

from kiln.renderers import webgpu_available
from kiln.runtime import Device
from kiln.tensor import Tensor
from kiln.tensor.datasets import digits
from kiln.tensor.export import export
from kiln.tensor.state import safe_load

BATCH = 16


def load_model(checkpoint: Path, device: str) -> object:
    """The digits CNN on `device` with the checkpoint's weights, in eval mode."""
    previous = Device.DEFAULT
    Device.DEFAULT = device
    try:
        model = make_model()
        model.load_state_dict(safe_load(checkpoint, device=device))
    finally:
        Device.DEFAULT = previous
    model.eval()
    return model


def run_c(folder: Path, images: np.ndarray) -> np.ndarray:
    """Builds the C artifact with its Makefile (or cc directly) and runs its main on `images`; the printed
    probabilities as a (batch, 10) array."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise SystemExit("no C compiler (cc, gcc or clang) found to build the C artifact")
    if shutil.which("make"):
        subprocess.run(["make", "-s", "-C", str(folder), "digits_main", f"CC={compiler}"], check=True)
    else:
        command = [compiler, "-O2", "-std=c11", "-fwrapv", "-o", "digits_main", "main.c", "digits.c", "-lm"]
        subprocess.run(command, cwd=folder, check=True)
    np.save(folder / "images.npy", images)
    result = subprocess.run(
        ["./digits_main", "digits.safetensors", "images.npy"], cwd=folder, capture_output=True, text=True, check=True
    )
    values = [float(line) for line in result.stdout.splitlines()[1:]]
    return np.array(values, dtype=np.float32).reshape(len(images), 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=Path("digits_cnn.safetensors"))
    parser.add_argument("--epochs", type=int, default=3, help="training epochs when the checkpoint does not exist")
    parser.add_argument("--out", type=Path, default=Path("build/export_digits"))
    arguments = parser.parse_args()
    if not arguments.checkpoint.exists():
        print(f"{arguments.checkpoint} not found: training {arguments.epochs} epochs first")
        run = train(arguments.epochs, checkpoint=arguments.checkpoint, progress=False)
        print(f"test accuracy {run.test_accuracy * 100:.2f}%, saved to {arguments.checkpoint}")
    _train_images, _train_labels, test_images, test_labels = digits(seed=0)
    images = test_images.numpy()[:BATCH]
    labels = test_labels.numpy()[:BATCH]

    model = load_model(arguments.checkpoint, "CPU")
    expected = model(Tensor(images)).softmax(-1).numpy()  # type: ignore[operator]
    c_artifact = export(
        lambda x: model(x).softmax(-1),  # type: ignore[operator]
        Tensor(images),
        target="c",
        out=arguments.out / "c",
        name="digits",
    )
    print(f"C artifact in {c_artifact.out}: " + ", ".join(f"{n} {s} B" for n, s in c_artifact.sizes().items()))
    probabilities = run_c(c_artifact.out, images)
    print(f"C predictions:    {probabilities.argmax(-1).tolist()}")
    print(f"kiln predictions: {expected.argmax(-1).tolist()}")
    print(f"labels:           {labels.tolist()}")
    print(f"largest difference from kiln's probabilities: {np.abs(probabilities - expected).max():.3g}")

    if not webgpu_available():
        print("no WebGPU adapter for kiln (pip install wgpu): the WebGPU page is not exported")
        return
    web_model = load_model(arguments.checkpoint, "WEBGPU")
    with_device = Tensor(images, device="WEBGPU")
    web_artifact = export(
        lambda x: web_model(x).softmax(-1),  # type: ignore[operator]
        with_device,
        target="webgpu",
        out=arguments.out / "webgpu",
        name="digits",
    )
    print(f"WebGPU page in {web_artifact.out}: " + ", ".join(f"{n} {s} B" for n, s in web_artifact.sizes().items()))
    print(f"serve it with `python -m http.server -d {web_artifact.out} 8000` and open http://localhost:8000/index.html")


if __name__ == "__main__":
    main()
