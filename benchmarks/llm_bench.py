"""kiln.tensor.llm prefill and decode tokens/s on a random-weight llama model, against transformers on torch.

The model (default about 100M parameters: dim 768, 12 layers, FFN 2048, 12 heads / 4 KV heads, vocab 32000) is
written as GGUF files (F16 and Q8_0, with the `gguf` package) into a temporary folder and loaded by `load_model`.
kiln generates with `Generator`; the reference is transformers' LlamaForCausalLM (float32, eager, KV cache) of the
same shape run by a Python that has torch (`--torch-python PATH`; skipped when not given). Each format is measured
in a fresh process; figures are medians over `--runs`, with each process's peak RSS.

    uv run python benchmarks/llm_bench.py [--size 100m|small] [--runs 3] [--torch-python /path/to/python]

Prefill is measured per prompt length of `--prompts` (default 64,200,500): the first prompt of that length (compile
included, after a warm-up with another length) and the median tokens/s of the runs after it. Decode is measured
after a prompt of each length of `--positions` (default 32,900): `--new` tokens from that position on, so its cost
shows whether attention reads the positions so far or the whole cache. `--context N` is the trained context written
into the GGUF (default 2048), `--max-context N` the KV cache kiln allocates (default 1024; 0: kiln's default,
min(trained, 4096)); `--temperature T` decodes by sampling (seeded) instead of greedily.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np

SIZES = {
    "100m": dict(dim=768, layers=12, ff=2048, heads=12, kv_heads=4, vocab=32000),
    "small": dict(dim=256, layers=4, ff=768, heads=8, kv_heads=4, vocab=4096),
}
CONTEXT = 2048

TORCH_SCRIPT = r"""
import json, resource, statistics, sys, time
import torch, transformers
shape, prompts, positions, new, runs, context = json.loads(sys.argv[1])
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["dim"], intermediate_size=shape["ff"],
    num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
    max_position_embeddings=context, tie_word_embeddings=False)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.randint(0, shape["vocab"], (1, max(prompts + positions)))
result = {"prefill": {}, "decode": {}}
with torch.no_grad():
    for length in prompts:
        times = []
        for _ in range(runs + 1):
            start = time.perf_counter()
            model(ids[:, :length], use_cache=True)
            times.append(time.perf_counter() - start)
        result["prefill"][length] = {"first": times[0], "tok_s": length / statistics.median(times[1:])}
    for position in positions:
        rates = []
        for _ in range(runs):
            out = model(ids[:, :position], use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            for _ in range(new):
                out = model(token, past_key_values=cache, use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            rates.append(new / (time.perf_counter() - start))
        result["decode"][position] = statistics.median(rates)
result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result["threads"] = torch.get_num_threads()
print(json.dumps(result))
"""


def write_gguf(path: Path, shape: dict[str, int], kind: gguf.GGMLQuantizationType, context: int = CONTEXT) -> None:
    rng = np.random.default_rng(0)
    dim, ff, heads, kv, vocab = shape["dim"], shape["ff"], shape["heads"], shape["kv_heads"], shape["vocab"]
    head_dim = dim // heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(context)
    writer.add_embedding_length(dim)
    writer.add_block_count(shape["layers"])
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)

    def add(name: str, *dims: int) -> None:
        if len(dims) == 1:
            writer.add_tensor(name, np.ones(dims, np.float32))
            return
        value = (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, value.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(value, kind), raw_dtype=kind)

    add("token_embd.weight", vocab, dim)
    add("output_norm.weight", dim)
    add("output.weight", vocab, dim)
    for layer in range(shape["layers"]):
        prefix = f"blk.{layer}."
        add(prefix + "attn_norm.weight", dim)
        add(prefix + "ffn_norm.weight", dim)
        add(prefix + "attn_q.weight", dim, dim)
        add(prefix + "attn_k.weight", kv * head_dim, dim)
        add(prefix + "attn_v.weight", kv * head_dim, dim)
        add(prefix + "attn_output.weight", dim, dim)
        add(prefix + "ffn_gate.weight", ff, dim)
        add(prefix + "ffn_up.weight", ff, dim)
        add(prefix + "ffn_down.weight", dim, ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def bench_kiln(
    path: Path, prompts: list[int], positions: list[int], new: int, runs: int, max_context: int | None,
    temperature: float,
) -> dict[str, object]:  # fmt: skip
    """Prefill figures per prompt length (the first prompt of that length, compile included, then the median
    tokens/s of `runs` more) and decode tokens/s after a prompt of each position's length, in this process."""
    from kiln.tensor.llm import Generator, load_model

    try:
        loaded = load_model(path, max_context=max_context)
    except TypeError:  # a kiln from before --max-context: its cache spans the trained context
        loaded = load_model(path)
    generator = Generator(loaded)
    ids = np.random.default_rng(1).integers(0, loaded.config.vocab_size, max(prompts + positions)).tolist()
    sampling = {"temperature": temperature, "top_k": 40, "top_p": 0.95} if temperature else {}
    list(generator.generate(ids[:7], max_tokens=4, **sampling))  # warm-up: a prompt length measured nowhere
    result: dict[str, object] = {"prefill": {}, "decode": {}}
    for length in prompts:
        generator.reset()  # every prefill measured here starts from an empty cache (no prefix reuse)
        started = time.perf_counter()
        list(generator.generate(ids[:length], max_tokens=1, **sampling))
        first = time.perf_counter() - started
        rates = []
        for run in range(runs):
            generator.reset()
            list(generator.generate(ids[:length], max_tokens=1, seed=run, **sampling))  # type: ignore[arg-type]
            rates.append(generator.last_stats.prefill_tokens_per_second)
        result["prefill"][length] = {"first": first, "tok_s": statistics.median(rates)}  # type: ignore[index]
    for position in positions:
        rates = []
        for run in range(runs):
            list(generator.generate(ids[:position], max_tokens=new + 1, seed=run, **sampling))  # type: ignore[arg-type]
            rates.append(generator.last_stats.decode_tokens_per_second)
        result["decode"][position] = statistics.median(rates)  # type: ignore[index]
    result["weights"] = loaded.model.parameter_bytes()
    result["cache_mb"] = loaded.model.cache_bytes() / 2**20
    return result


def _ints(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def _report(who: str, got: dict[str, Any], extra: str) -> None:
    prefill = "  ".join(
        f"{length}: {row['tok_s']:7.1f} tok/s (first {row['first'] * 1e3:6.0f} ms)"
        for length, row in got["prefill"].items()
    )
    decode = "  ".join(f"pos {position}: {rate:6.2f} tok/s" for position, rate in got["decode"].items())
    print(f"{who}: prefill {prefill}")
    print(f"{' ' * len(who)}  decode  {decode}  peak RSS {got['rss_mb']:.0f} MiB{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompts", default="64,200,500", help="prompt lengths whose prefill is measured")
    parser.add_argument("--positions", default="32,900", help="decode is measured after a prompt of each length")
    parser.add_argument("--new", type=int, default=16, help="decoded tokens per run")
    parser.add_argument("--formats", default="F16,Q8_0")
    parser.add_argument("--context", type=int, default=CONTEXT, help="the trained context written into the GGUF")
    parser.add_argument("--max-context", type=int, default=1024, help="kiln's KV cache positions (0: kiln's default)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sample (top-k 40, top-p 0.95); 0: greedy")
    parser.add_argument("--torch-python", help="a Python with torch and transformers (reference; omitted: skipped)")
    parser.add_argument("--kiln-child", help=argparse.SUPPRESS)  # internal: measure one GGUF file in a fresh process
    args = parser.parse_args()
    prompts, positions = _ints(args.prompts), _ints(args.positions)
    if max(prompts + positions) + args.new > min(args.context, args.max_context or args.context):
        parser.error("the longest prompt or position plus --new exceeds --context / --max-context")
    if args.kiln_child:
        got = bench_kiln(
            Path(args.kiln_child), prompts, positions, args.new, args.runs, args.max_context or None, args.temperature
        )
        got["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(got))
        return
    shape = SIZES[args.size]
    params = shape["vocab"] * shape["dim"] * 2 + shape["layers"] * (
        2 * shape["dim"] ** 2
        + 2 * shape["dim"] * shape["dim"] // shape["heads"] * shape["kv_heads"]
        + 3 * shape["dim"] * shape["ff"]
    )
    print(
        f"model: {args.size} ({params / 1e6:.0f}M parameters), prompts {prompts}, decode {args.new} tokens after "
        f"prompts of {positions}, runs {args.runs}, context {args.context}, "
        f"max-context {args.max_context or 'default'}, "
        f"temperature {args.temperature} (medians; each format measured in a fresh process)"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in args.formats.split(","):
            kind = gguf.GGMLQuantizationType[name]
            path = Path(folder) / f"bench-{name.lower()}.gguf"
            write_gguf(path, shape, kind, args.context)
            started = time.perf_counter()
            command = [sys.executable, __file__, "--kiln-child", str(path), "--prompts", args.prompts]
            command += ["--positions", args.positions, "--new", str(args.new), "--runs", str(args.runs)]
            command += ["--temperature", str(args.temperature), "--context", str(args.context)]
            command += ["--max-context", str(args.max_context)]
            child = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()
            got = json.loads(child[-1])
            extra = (
                f"  weights {got['weights'] / 2**20:.0f} MiB  KV cache {got['cache_mb']:.0f} MiB  "
                f"({time.perf_counter() - started:.0f} s in all)"
            )
            _report(f"kiln {name:5s}", got, extra)
    if args.torch_python:
        payload = json.dumps([shape, prompts, positions, args.new, args.runs, args.context])
        out = (
            subprocess.run([args.torch_python, "-c", TORCH_SCRIPT, payload], capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        _report(f"transformers ({json.loads(out)['threads']} threads, f32)", json.loads(out), "")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
