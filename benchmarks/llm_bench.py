"""kiln.tensor.llm prefill and decode tokens/s on a random-weight llama model, against transformers on torch.

The model (default about 100M parameters: dim 768, 12 layers, FFN 2048, 12 heads / 4 KV heads, vocab 32000) is
written as GGUF files (F16 and Q8_0, with the `gguf` package) into a temporary folder and loaded by `load_model`.
kiln generates with `Generator` (prefill in one pass, jitted decode); the reference is transformers'
LlamaForCausalLM (float32, eager, KV cache) of the same shape run by a Python that has torch
(`--torch-python PATH`; skipped when not given). Figures are medians over `--runs`; peak RSS of each process.

    uv run python benchmarks/llm_bench.py [--size 100m|small] [--runs 3] [--torch-python /path/to/python]

`--context N` is the trained context written into the GGUF (default 512), `--max-context N` the KV cache kiln
allocates (default: kiln's, min(trained, 4096)); `--temperature T` decodes by sampling (seeded, so each run draws the
same tokens) instead of greedily: fresh token ids, which compiled a kernel each when the decode step read its
embedding row by a host-side slice.
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

import gguf
import numpy as np

SIZES = {
    "100m": dict(dim=768, layers=12, ff=2048, heads=12, kv_heads=4, vocab=32000),
    "small": dict(dim=256, layers=4, ff=768, heads=8, kv_heads=4, vocab=4096),
}
CONTEXT = 512

TORCH_SCRIPT = r"""
import json, resource, statistics, sys, time
import torch, transformers
shape, prompt_len, new, runs, context = json.loads(sys.argv[1])
torch.manual_seed(0)
config = transformers.LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["dim"], intermediate_size=shape["ff"],
    num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
    max_position_embeddings=context, tie_word_embeddings=False)
model = transformers.LlamaForCausalLM(config).eval()
prompt = torch.randint(0, shape["vocab"], (1, prompt_len))
prefill, decode = [], []
with torch.no_grad():
    for _ in range(runs):
        start = time.perf_counter()
        out = model(prompt, use_cache=True)
        prefill.append(prompt_len / (time.perf_counter() - start))
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(new):
            out = model(token, past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        decode.append(new / (time.perf_counter() - start))
print(json.dumps({"prefill": statistics.median(prefill), "decode": statistics.median(decode),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "threads": torch.get_num_threads()}))
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
    path: Path, prompt_len: int, new: int, runs: int, max_context: int | None = None, temperature: float = 0.0
) -> tuple[float, float, int]:
    from kiln.tensor.llm import Generator, load_model

    try:
        loaded = load_model(path, max_context=max_context)
    except TypeError:  # a kiln from before --max-context: its cache spans the trained context
        loaded = load_model(path)
    generator = Generator(loaded)
    prompt = np.random.default_rng(1).integers(0, loaded.config.vocab_size, prompt_len).tolist()
    sampling = {"temperature": temperature, "top_k": 40, "top_p": 0.95} if temperature else {}
    list(generator.generate(prompt, max_tokens=4, **sampling))  # compile the prefill and capture the decode step
    prefill, decode = [], []
    for run in range(runs):
        list(generator.generate(prompt, max_tokens=new + 1, seed=run, **sampling))  # type: ignore[arg-type]
        stats = generator.last_stats
        prefill.append(stats.prefill_tokens_per_second)
        decode.append(stats.decode_tokens_per_second)
    return statistics.median(prefill), statistics.median(decode), loaded.model.parameter_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    parser.add_argument("--new", type=int, default=32, help="decoded tokens per run")
    parser.add_argument("--formats", default="F16,Q8_0")
    parser.add_argument("--context", type=int, default=CONTEXT, help="the trained context written into the GGUF")
    parser.add_argument("--max-context", type=int, default=None, help="kiln's KV cache positions (default: kiln's)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sample (top-k 40, top-p 0.95); 0: greedy")
    parser.add_argument("--torch-python", help="a Python with torch and transformers (reference; omitted: skipped)")
    parser.add_argument("--kiln-child", help=argparse.SUPPRESS)  # internal: measure one GGUF file in a fresh process
    args = parser.parse_args()
    if args.kiln_child:
        prefill, decode, weight_bytes = bench_kiln(
            Path(args.kiln_child), args.prompt, args.new, args.runs, args.max_context, args.temperature
        )
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"prefill": prefill, "decode": decode, "weights": weight_bytes, "rss_mb": rss}))
        return
    shape = SIZES[args.size]
    params = shape["vocab"] * shape["dim"] * 2 + shape["layers"] * (
        2 * shape["dim"] ** 2
        + 2 * shape["dim"] * shape["dim"] // shape["heads"] * shape["kv_heads"]
        + 3 * shape["dim"] * shape["ff"]
    )
    print(
        f"model: {args.size} ({params / 1e6:.0f}M parameters), prompt {args.prompt}, decode {args.new}, "
        f"runs {args.runs}, context {args.context}, max-context {args.max_context or 'default'}, temperature "
        f"{args.temperature} (medians; each measured in a fresh process)"
    )
    with tempfile.TemporaryDirectory() as folder:
        for name in args.formats.split(","):
            kind = gguf.GGMLQuantizationType[name]
            path = Path(folder) / f"bench-{name.lower()}.gguf"
            write_gguf(path, shape, kind, args.context)
            started = time.perf_counter()
            command = [sys.executable, __file__, "--kiln-child", str(path), "--prompt", str(args.prompt)]
            command += ["--new", str(args.new), "--runs", str(args.runs), "--temperature", str(args.temperature)]
            command += ["--max-context", str(args.max_context)] if args.max_context else []
            child = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()
            got = json.loads(child[-1])
            print(
                f"kiln {name:5s}: prefill {got['prefill']:8.1f} tok/s  decode {got['decode']:7.2f} tok/s  weights "
                f"{got['weights'] / 2**20:.0f} MiB  peak RSS {got['rss_mb']:.0f} MiB  "
                f"({time.perf_counter() - started:.0f} s incl. compile)"
            )
    if args.torch_python:
        payload = json.dumps([shape, args.prompt, args.new, args.runs, args.context])
        out = (
            subprocess.run([args.torch_python, "-c", TORCH_SCRIPT, payload], capture_output=True, text=True, check=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        ref = json.loads(out)
        print(
            f"transformers (torch CPU eager, float32, {ref['threads']} threads): prefill {ref['prefill']:8.1f} tok/s  "
            f"decode {ref['decode']:7.2f} tok/s  peak RSS {ref['rss_mb']:.0f} MiB"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
