"""JAX (jit, XLA on the CPU) as a second peer of the benchmarks, in a subprocess of a Python that has jax (issue 42).

tensor_bench.py and train_bench.py run under kiln's environment, which has no jax: they start `JAX_SCRIPT` in a
subprocess of the Python given (`--jax-python`, else the `--torch-python` one) and ask it for one row at a time,
right after kiln's own run of the row (both see the same load on a shared machine). `start()` returns None and
prints why when no such Python was given or jax does not import there: every JAX row is then skipped.

Rows (keys): "matmul N" (float32 N x N), "softmax" / "log_softmax" / "layer_norm" over (4096, 1024), "conv2d",
"conv2d input grad", "conv2d weight grad" (tensor_bench's (32,16,32,32) x (32,16,3,3), padding 1; the gradients
through `jax.vjp` of the convolution, the primal output unused and removed by XLA), "max_pool2d backward" (2x2
windows over (32,16,32,32), through `jax.vjp`: the forward's maxima and the input gradient), "mlp step" (the
quickstart step of mlp_step.py: MLP 2-64-64-2, cross-entropy, the gradients' joint norm clipped to 0.5, SGD with
momentum 0.9, lr 0.3, the loss read on the host), "cnn step" (train_bench.py's small CNN on a (128, 1, 28, 28)
batch, plain SGD lr 0.01) and "resblock step" (train_bench.py's ResNet basic block with BatchNorm in training mode,
running statistics updated, on a (32, 16, 16, 16) batch, plain SGD lr 0.01). Each function is one `jax.jit`; a
step takes and returns its whole state (parameters, momenta, running statistics). Every figure is the median of
`repeats` timed calls after a warm-up of at least 0.25 s (compilation included there), each call waited for
(`block_until_ready`, or the loss read as a float for the steps).
"""

from __future__ import annotations

import json
import subprocess
import textwrap

JAX_SCRIPT = textwrap.dedent(
    """
    import json, statistics, sys, time
    import jax, jax.numpy as jnp
    from jax import lax
    repeats = int(sys.argv[1])
    key = jax.random.PRNGKey(0)
    def normal(*shape):
        global key
        key, sub = jax.random.split(key)
        return jax.random.normal(sub, shape, jnp.float32)
    def median(run):
        started = time.perf_counter()
        run()
        while time.perf_counter() - started < 0.25:
            run()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return statistics.median(times)
    def ready(fn, *args):
        return lambda: jax.block_until_ready(fn(*args))
    def conv(x, w, padding):
        return lax.conv_general_dilated(x, w, (1, 1), ((padding, padding), (padding, padding)))
    def cross_entropy(logits, labels):
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), labels[:, None], 1)
        return -picked.mean()
    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
    def looped(step, state):
        # one call per run: the state the jitted step returns is the next call's (as a training loop does)
        def run():
            nonlocal state
            state, loss = step(state)
            return float(loss)
        return run
    def mlp_step():
        x, y = normal(400, 2), jax.random.randint(jax.random.PRNGKey(1), (400,), 0, 2)
        sizes = (2, 64, 64, 2)
        params = [(normal(a, b) * 0.5, jnp.zeros(b)) for a, b in zip(sizes, sizes[1:])]
        def loss_of(params):
            h = x
            for index, (w, b) in enumerate(params):
                h = h @ w + b
                if index < len(params) - 1:
                    h = jnp.tanh(h)
            return cross_entropy(h, y)
        @jax.jit
        def step(state):
            params, momenta = state
            loss, grads = jax.value_and_grad(loss_of)(params)
            norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree_util.tree_leaves(grads)))
            scale = jnp.minimum(1.0, 0.5 / (norm + 1e-6))
            momenta = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g * scale, momenta, grads)
            params = jax.tree_util.tree_map(lambda p, m: p - 0.3 * m, params, momenta)
            return (params, momenta), loss
        return looped(step, (params, jax.tree_util.tree_map(jnp.zeros_like, params)))
    def cnn_step():
        x, y = normal(128, 1, 28, 28), jax.random.randint(jax.random.PRNGKey(1), (128,), 0, 10)
        params = {"c1": normal(8, 1, 3, 3) * 0.3, "b1": jnp.zeros(8), "c2": normal(16, 8, 3, 3) * 0.1,
                  "b2": jnp.zeros(16), "w": normal(400, 10) * 0.05, "b": jnp.zeros(10)}
        def loss_of(p):
            h = pool(jax.nn.relu(conv(x, p["c1"], 0) + p["b1"][None, :, None, None]))
            h = pool(jax.nn.relu(conv(h, p["c2"], 0) + p["b2"][None, :, None, None]))
            return cross_entropy(h.reshape(h.shape[0], -1) @ p["w"] + p["b"], y)
        @jax.jit
        def step(params):
            loss, grads = jax.value_and_grad(loss_of)(params)
            return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), loss
        return looped(step, params)
    def resblock_step():
        x, y = normal(32, 16, 16, 16), jax.random.randint(jax.random.PRNGKey(1), (32,), 0, 10)
        params = {"c1": normal(16, 16, 3, 3) * 0.08, "g1": jnp.ones(16), "b1": jnp.zeros(16),
                  "c2": normal(16, 16, 3, 3) * 0.08, "g2": jnp.ones(16), "b2": jnp.zeros(16),
                  "w": normal(16, 10) * 0.25, "b": jnp.zeros(10)}
        stats = {name: (jnp.zeros(16), jnp.ones(16)) for name in ("1", "2")}
        def norm(h, gamma, beta, running):
            mean, var = h.mean((0, 2, 3)), h.var((0, 2, 3))
            count = h.size / h.shape[1]
            new = (0.9 * running[0] + 0.1 * mean, 0.9 * running[1] + 0.1 * var * count / (count - 1))
            scaled = (h - mean[None, :, None, None]) * lax.rsqrt(var + 1e-5)[None, :, None, None]
            return scaled * gamma[None, :, None, None] + beta[None, :, None, None], new
        def loss_of(p, stats):
            h, s1 = norm(conv(x, p["c1"], 1), p["g1"], p["b1"], stats["1"])
            h, s2 = norm(conv(jax.nn.relu(h), p["c2"], 1), p["g2"], p["b2"], stats["2"])
            h = jax.nn.relu(h + x).mean((2, 3))
            return cross_entropy(h @ p["w"] + p["b"], y), {"1": s1, "2": s2}
        @jax.jit
        def step(state):
            params, stats = state
            (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params, stats)
            return (jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads), stats), loss
        return looped(step, (params, stats))
    def case(key):
        if key.startswith("matmul ") and key.split()[1].isdigit():
            size = int(key.split()[1])
            return ready(jax.jit(jnp.matmul), normal(size, size), normal(size, size))
        rows = {"softmax": lambda v: jax.nn.softmax(v, -1), "log_softmax": lambda v: jax.nn.log_softmax(v, -1),
                "layer_norm": lambda v: (v - v.mean(-1, keepdims=True)) * lax.rsqrt(v.var(-1, keepdims=True) + 1e-5)}
        if key in rows:
            return ready(jax.jit(rows[key]), normal(4096, 1024))
        images, weights, grad = normal(32, 16, 32, 32), normal(32, 16, 3, 3), normal(32, 32, 32, 32)
        if key == "conv2d":
            return ready(jax.jit(lambda x, w: conv(x, w, 1)), images, weights)
        if key == "conv2d input grad":
            gradient = jax.jit(lambda w, g: jax.vjp(lambda x: conv(x, w, 1), images)[1](g)[0])
            return ready(gradient, weights, grad)
        if key == "conv2d weight grad":
            gradient = jax.jit(lambda x, g: jax.vjp(lambda w: conv(x, w, 1), weights)[1](g)[0])
            return ready(gradient, images, grad)
        if key == "max_pool2d backward":
            source, upstream = normal(32, 16, 32, 32), normal(32, 16, 16, 16)
            return ready(jax.jit(lambda x, g: jax.vjp(pool, x)[1](g)[0]), source, upstream)
        steps = {"mlp step": mlp_step, "cnn step": cnn_step, "resblock step": resblock_step}
        return steps[key]() if key in steps else None
    print(json.dumps({"version": jax.__version__, "devices": str(jax.devices())}), flush=True)
    for line in sys.stdin:
        run = case(line.strip())
        print(json.dumps(None if run is None else median(run)), flush=True)
    """
)


class PeerProcess:
    """A reference framework in a subprocess of another Python, timing one row on request (`seconds(key)`: its
    median for row `key`, None for a row it has no reference for), right after kiln's own run of the same row so
    that both see the same load on a shared machine. The script prints a JSON line about itself, then answers each
    key read from stdin with a JSON number or null."""

    name = "reference"

    def __init__(self, python: str, script: str, *arguments: object) -> None:
        command = [python, "-c", script, *map(str, arguments)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.about: dict[str, object] = json.loads(self._line())

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} reference process stopped (exit status {self.process.poll()})")
        return line

    def seconds(self, key: str) -> float | None:
        """The peer's median seconds for row `key`, None for a row it has no reference for."""
        assert self.process.stdin is not None
        self.process.stdin.write(key + "\n")
        self.process.stdin.flush()
        value: float | None = json.loads(self._line())
        return value

    def close(self) -> None:
        """Ends the subprocess."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


class JaxReference(PeerProcess):
    """The JAX subprocess (jit, XLA CPU)."""

    name = "JAX"

    def __init__(self, python: str, repeats: int) -> None:
        super().__init__(python, JAX_SCRIPT, repeats)


def start(python: str | None, repeats: int) -> JaxReference | None:
    """The JAX peer run by `python`, or None after printing why JAX's rows are skipped."""
    if python is None:
        print("JAX peer: skipped (no --jax-python or --torch-python given)")
        return None
    found = subprocess.run([python, "-c", "import jax"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        print(f"JAX peer: skipped (jax does not import under {python})")
        return None
    peer = JaxReference(python, repeats)
    print(f"JAX peer: jax {peer.about['version']} on {peer.about['devices']} (jit)")
    return peer
