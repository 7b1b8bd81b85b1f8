"""kiln.tensor.llm's server under load: aggregate tokens/s with 1, 8 and 16 concurrent clients (continuous batching).

The model is llm_bench.py's random-weight llama (default about 100M parameters, `--size small` for a quick run)
written as a GGUF file (`--format`, default F16); its tokenizer is a byte-level BPE over the model's vocabulary
built here (256 byte tokens and placeholder names for the rest: a prompt of N ASCII characters is N tokens). The
server (kiln.tensor.llm.server, `--max-batch` 8) runs in this process on 127.0.0.1 and the clients are threads
speaking HTTP with the standard library. Each client sends `--requests` completions one after another (a prompt of
`--prompt` tokens, `--new` new tokens, greedy; the tokenizer has no stop token, so every request produces all of
them). Per client count: aggregate completion tokens/s (all clients' tokens over the wall time), the per-request
latency (median / max) and the ratio to one client. The references in the same run: the batch-1 `Generator`'s
decode tokens/s on the same model without the server, and the `BatchedGenerator`'s steps alone with as many
sequences as clients (what the server adds is HTTP, text and scheduling; a joining request's prompt is prefilled
`--prefill-chunk` tokens per step, between the others' decode steps), and before both the decode step alone
(every sequence prefilled first; its fastest and median time).
Every client count is run once untimed first (compiles).

Both KV layouts are measured in the same run (`--layouts`), one after the other per measurement (the decode step
alone, the batched steps alone, then the server per client count), so that a change in the machine's load falls on
both: `paged`, the server's default, one pool of `--kv-blocks` blocks of 16 rows per layer shared by every sequence
(`PagedBatchedGenerator`; by default the server's: as many rows as the slots, kiln.tensor.llm.paged_cache's
`default_kv_blocks`), and `slots`, a (max-context)-row cache per sequence slot (`BatchedGenerator`), each with the
KV memory it reserves. The last lines give each layout's figures over the first one's.

    uv run python benchmarks/llm_serve_bench.py [--size 100m|small] [--clients 1,8,16] [--new 64] [--requests 3]
        [--layouts paged,slots] [--kv-blocks N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np


def _llm_bench() -> Any:
    """benchmarks/llm_bench.py as a module (its model shapes and GGUF writer)."""
    spec = importlib.util.spec_from_file_location("llm_bench", Path(__file__).with_name("llm_bench.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def byte_tokenizer(vocab: int) -> Any:
    """A kiln Tokenizer: byte-level BPE without merges, the 256 byte tokens first, then `<tN>` placeholders."""
    import tokenizers

    from kiln.tensor.llm.tokenizer import Tokenizer

    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    names = {text: index for index, text in enumerate(alphabet)}
    names |= {f"<t{index}>": index for index in range(len(alphabet), vocab)}
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=names, merges=[]))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    return Tokenizer(backend)


def complete(url: str, body: dict[str, Any]) -> tuple[int, float]:
    """(completion tokens, seconds) of one non-streaming completion."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    return int(answer["usage"]["completion_tokens"]), time.perf_counter() - started


def load(url: str, model: str, clients: int, requests: int, prompt: int, new: int) -> dict[str, float]:
    """Runs `clients` threads of `requests` completions each; aggregate tokens/s and latencies."""
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz "))
    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()

    def client(index: int) -> None:
        rng = np.random.default_rng(index)
        for _ in range(requests):
            text = "".join(rng.choice(letters, prompt))
            body = {"model": model, "prompt": text, "max_tokens": new, "temperature": 0}
            produced, seconds = complete(url, body)
            with lock:
                tokens[0] += produced
                latencies.append(seconds)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return {"tok_s": tokens[0] / wall, "median": statistics.median(latencies), "max": max(latencies),
            "tokens": tokens[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["100m", "small"], default="100m")
    parser.add_argument("--format", default="F16", help="the GGUF weight type (F16, Q8_0, Q4_0, F32, ...)")
    parser.add_argument("--clients", default="1,8,16", help="concurrent client counts to measure")
    parser.add_argument("--requests", type=int, default=3, help="completions per client, one after another")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens per request")
    parser.add_argument("--new", type=int, default=64, help="new tokens per request")
    parser.add_argument("--max-batch", type=int, default=8, help="the server's --max-batch")
    parser.add_argument("--max-context", type=int, default=512, help="the KV cache positions")
    parser.add_argument("--prefill-chunk", type=int, default=64, help="prompt tokens prefilled between decode steps")
    parser.add_argument("--layouts", default="paged,slots", help="KV layouts to measure: paged, slots")
    parser.add_argument("--kv-blocks", type=int, default=0, help="the paged pool's blocks (0: the server's default)")
    args = parser.parse_args()
    counts = [int(item) for item in args.clients.split(",") if item]
    layouts = [item for item in args.layouts.split(",") if item]

    import gguf

    from kiln.tensor.llm import load_model
    from kiln.tensor.llm.generate import Generator
    from kiln.tensor.llm.paged_cache import default_kv_blocks
    from kiln.tensor.llm.session import ChatModel

    kv_blocks = args.kv_blocks or default_kv_blocks(args.max_batch, args.max_context)  # the server's default

    bench = _llm_bench()
    shape = bench.SIZES[args.size]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "serve-bench.gguf"
        bench.write_gguf(path, shape, gguf.GGMLQuantizationType[args.format])
        loaded = load_model(path, max_context=args.max_context)
    print(f"model: {args.size} ({loaded.model.parameter_bytes() / 2**20:.0f} MiB of {args.format} weights), prompt "
          f"{args.prompt} tokens, {args.new} new tokens per request, {args.requests} requests per client, "
          f"--max-batch {args.max_batch}, max-context {args.max_context}")  # fmt: skip

    generator = Generator(loaded)
    ids = np.random.default_rng(0).integers(0, shape["vocab"], args.prompt).tolist()
    list(generator.generate(ids, max_tokens=4))
    rates = []
    for _ in range(3):
        list(generator.generate(ids, max_tokens=args.new))
        rates.append(generator.last_stats.decode_tokens_per_second)
    single = statistics.median(rates)
    print(f"reference: Generator (batch 1, no server) decode {single:7.1f} tok/s")
    tokenizer = byte_tokenizer(shape["vocab"])
    models = [ChatModel(loaded, tokenizer, None, kv_blocks if layout == "paged" else None) for layout in layouts]
    batched = [model.batched(args.max_batch, args.prefill_chunk) for model in models]  # the servers' own generators
    for layout, model, each in zip(layouts, models, batched, strict=True):
        blocks = f" ({model.kv_blocks} blocks of 16 rows)" if model.kv_blocks else ""
        print(f"layout {layout}: KV memory reserved {each.kv_bytes() / 2**20:.1f} MiB{blocks}")
    figures: dict[str, dict[str, float]] = {layout: {} for layout in layouts}
    batch_counts = sorted({min(count, args.max_batch) for count in counts})  # more clients than slots queue
    for count in batch_counts:  # the decode step alone: `count` sequences at positions past the prompt, no prefill
        for layout, each in zip(layouts, batched, strict=True):
            fastest, median, steps = decode_steps(each, ids, count, args.new)
            figures[layout][f"decode step, {count} sequences (fastest, 1/ms)"] = 1 / fastest
            print(f"{layout}: decode step alone, {count:2d} sequences: fastest {fastest:7.2f} ms, median "
                  f"{median:7.2f} ms ({steps} steps)")  # fmt: skip
    for count in batch_counts:  # the batched steps alone: `count` sequences decoding together, no HTTP, no text
        for layout, each in zip(layouts, batched, strict=True):
            rate = batched_rate(each, ids, count, args.new)
            figures[layout][f"batched steps, {count} sequences (tok/s)"] = rate
            print(f"{layout}: {type(each).__name__} (no server), {count:2d} sequences: decode {rate:7.1f} tok/s "
                  f"aggregate (best of 3)")  # fmt: skip
    serve_all(models, layouts, args, counts, figures)
    first = layouts[0]
    for layout in layouts[1:]:
        for what, value in figures[layout].items():
            print(f"{layout} over {first}: {what}: {value / figures[first][what]:5.2f}x")


def decode_steps(batched: Any, ids: list[int], count: int, new: int) -> tuple[float, float, int]:
    """The fastest and median decode step (ms) of `count` sequences prefilled first, over 3 rounds, and the steps."""
    steps = []
    for _ in range(3):
        for index in range(count):
            batched.start(ids[: len(ids) - index], max_tokens=new)
        while batched.joining:
            batched.step()
        while batched.active:
            started = time.perf_counter()
            batched.decode()
            steps.append(time.perf_counter() - started)
    return min(steps) * 1e3, statistics.median(steps) * 1e3, len(steps)


def batched_rate(batched: Any, ids: list[int], count: int, new: int) -> float:
    """The best of 3 aggregate tokens/s of `count` sequences joining and decoding together (no HTTP, no text)."""
    rates = []
    for _ in range(3):
        for index in range(count):
            batched.start(ids[: len(ids) - index], max_tokens=new)
        started, produced = time.perf_counter(), 0
        while batched.active:
            produced += len(batched.step())
        rates.append(produced / (time.perf_counter() - started))
    return max(rates)


def serve_all(
    models: list[Any], layouts: list[str], args: argparse.Namespace, counts: list[int], figures: dict[str, Any]
) -> None:
    """A server per layout on 127.0.0.1, then per client count each server under that many clients in turn."""
    from kiln.tensor.llm.server import ServerLimits, make_server

    limits = ServerLimits(
        max_batch=args.max_batch, prefill_chunk=args.prefill_chunk, max_queue=max(64, 2 * max(counts))
    )
    servers = [make_server(model, port=0, limits=limits) for model in models]
    for httpd, _ in servers:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        baselines: dict[str, float] = {}
        for clients in counts:
            for layout, model, (httpd, _) in zip(layouts, models, servers, strict=True):
                url = f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"
                load(url, model.name, clients, 2, args.prompt, args.new)  # compiles this width's steps, captures
                got = load(url, model.name, clients, args.requests, args.prompt, args.new)
                baseline = baselines.setdefault(layout, got["tok_s"])
                figures[layout][f"server, {clients} clients (tok/s)"] = got["tok_s"]
                print(f"{layout}: {clients:3d} client{'s' if clients > 1 else ' '}: {got['tok_s']:7.1f} tok/s "
                      f"aggregate ({got['tokens']:.0f} tokens)  latency median {got['median']:6.2f} s  max "
                      f"{got['max']:6.2f} s  {got['tok_s'] / baseline:5.2f}x one client's")  # fmt: skip
    finally:
        for httpd, logic in servers:
            httpd.shutdown()
            httpd.server_close()
            logic.close()


if __name__ == "__main__":
    main()
