"""kiln.tensor.export, target "webgpu": models built on the WEBGPU device, exported, served over HTTP and run in a
real headless Chromium (Debian's, driven by Playwright, WebGPU on SwiftShader's Vulkan); the page's outputs must match
kiln's own (on WEBGPU) within 1e-5, and the MLP's a numpy forward pass.

Without Chromium these tests are skipped (KILN_REQUIRE_BROWSER makes that a failure, as for the viz browser tests);
without a WebGPU adapter for kiln (wgpu) too. The file name carries "webgpu": the root conftest marks the tests so
that they run in the WEBGPU pytest process.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kiln.renderers import webgpu_available
from kiln.tensor import Tensor, nn
from kiln.tensor.export import export

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = [
    pytest.mark.default_device("WEBGPU"),
    pytest.mark.skipif(not webgpu_available(), reason="no WebGPU adapter for kiln (wgpu)"),
]

REPOSITORY = Path(__file__).resolve().parents[4]
# headless Chromium exposes WebGPU with these flags, on SwiftShader's Vulkan (no GPU needed)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-webgpu-adapter=swiftshader",
    "--disable-vulkan-surface",
]


def chromium_path() -> str | None:
    """KILN_CHROMIUM, or Debian's chromium on PATH."""
    return os.environ.get("KILN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    path = chromium_path()
    if path is None:
        message = "no Chromium (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("KILN_REQUIRE_BROWSER"):
            pytest.fail(message + "; KILN_REQUIRE_BROWSER is set, so the browser tests must run")
        pytest.skip(message)
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""


@pytest.fixture
def serve() -> Iterator[Any]:
    """`serve(folder)`: the URL of an HTTP server of `folder` (stopped after the test)."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(folder: Path) -> str:
        handler = functools.partial(_QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def run_in_page(browser: Any, url: str, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Opens the artifact's index.html (its demo must finish), then imports NAME.js in the page and runs it on
    `inputs`; the outputs as float64 arrays."""
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    try:
        page.goto(url + "index.html")
        page.wait_for_function("() => !document.getElementById('status').textContent.startsWith('loading')")
        status = page.inner_text("#status")
        assert status.startswith("done"), status
        script = """async ([name, inputs]) => {
            const model = await import(`./${name}.js`);
            await model.load(`./${name}.safetensors`);
            const outputs = await model.run(inputs.map((values) => new Float32Array(values)));
            return outputs.map((output) => Array.from(output));
        }"""
        found = page.evaluate(script, [name, [array.reshape(-1).tolist() for array in inputs]])
    finally:
        page.close()
    assert errors == [], f"JavaScript errors: {errors}"
    return [np.array(values, dtype=np.float64) for values in found]


def test_mlp_in_the_browser_matches_numpy_and_kiln(browser: Any, serve: Any, out_dir: Path) -> None:
    Tensor.manual_seed(11)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
    expected = model(Tensor(x)).numpy()
    artifact = export(model, Tensor(x), target="webgpu", out=out_dir, name="mlp")
    assert set(artifact.sizes()) == {"mlp.js", "index.html", "mlp.safetensors"}
    (output,) = run_in_page(browser, serve(out_dir), "mlp", [x])
    np.testing.assert_allclose(output.reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)
    weights = [parameter.numpy().astype(np.float64) for parameter in model.parameters()]
    hidden = np.maximum(x @ weights[0].T + weights[1], 0)
    np.testing.assert_allclose(output.reshape(expected.shape), hidden @ weights[2].T + weights[3], atol=1e-5)


def test_digits_cnn_in_the_browser(browser: Any, serve: Any, out_dir: Path, digits_example: Any) -> None:
    Tensor.manual_seed(12)
    model = digits_example.make_model()
    images = np.random.default_rng(6).random((4, 1, 8, 8), dtype=np.float32)
    expected = model(Tensor(images)).softmax(-1).numpy()
    artifact = export(lambda x: model(x).softmax(-1), Tensor(images), target="webgpu", out=out_dir, name="digits")
    module = (out_dir / "digits.js").read_text()
    assert "digits: exported by kiln" in module and "input0: shape (4, 1, 8, 8), float32" in module
    assert str(out_dir) not in module
    (output,) = run_in_page(browser, serve(artifact.out), "digits", [images])
    np.testing.assert_allclose(output.reshape(expected.shape), expected, rtol=1e-5, atol=1e-5)


def test_variable_argument_in_the_browser(browser: Any, serve: Any, out_dir: Path, first_rows: Any) -> None:
    scale = first_rows.scale
    export(first_rows.function, Tensor(scale), first_rows.rows.bind(3), target="webgpu", out=out_dir, name="rows")
    page = browser.new_page()
    try:
        page.goto(serve(out_dir) + "index.html")
        page.wait_for_function("() => !document.getElementById('status').textContent.startsWith('loading')")
        assert page.inner_text("#status").startswith("done")
        script = """async ([scale, counts]) => {
            const model = await import("./rows.js");
            await model.load("./rows.safetensors");
            const results = [];
            for (const rows of counts) {
                const [output] = await model.run([new Float32Array(scale)], { rows });
                results.push(Array.from(output));
            }
            let refused = "";
            try { await model.run([new Float32Array(scale)], { rows: 9 }); } catch (error) { refused = error.message; }
            return [results, refused];
        }"""
        results, refused = page.evaluate(script, [scale.tolist(), [1, 5, 8]])
    finally:
        page.close()
    for count, output in zip((1, 5, 8), results):
        np.testing.assert_allclose(output, first_rows.expected(count), rtol=1e-6)
    assert refused == "variable rows = 9 is outside [1, 8]"
