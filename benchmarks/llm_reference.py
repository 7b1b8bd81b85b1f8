"""Greedy ids of llm_bench's random-weight llama: kiln against a float64 numpy forward over gguf-py's dequantization.

The question this answers: when kiln's greedy ids differ from llama.cpp's on a GGUF file (llm_bench's Q8_0 file
differs at id 10 after a 32-token prompt while F16 and Q4_K_M agree), is kiln computing the wrong values, or is the
greedy choice a near-tie that llama.cpp's lower-precision arithmetic tips? The reference is written here from the
llama architecture (RMSNorm, rope on adjacent pairs as llama.cpp's LLM_ARCH_LLAMA rotates them, grouped-query
attention, SiLU-gated FFN) in float64 over the weights gguf-py decodes from the same bytes, recomputing the whole
sequence for each new id, so it shares no code with kiln. Printed per format:

- kiln's ids, the float64 reference's ids and the first mismatch; the reference's top-1 minus top-2 logit at each
  step (a small margin is a near-tie);
- at the first step where kiln and llama.cpp (`--llama-python`, default $KILN_LLAMA_PYTHON; skipped without it)
  differ: kiln's logits there against the reference's (max abs difference over the vocabulary), and the two ids'
  logits under emulations of llama.cpp's CPU arithmetic, one at a time and together: `q8` quantizes the activations
  entering a Q8_0 matrix product to Q8_0 blocks (llama.cpp's vec_dot_type for Q8_0 weights: 32 values under one
  float16 scale, amax / 127), `kv16` rounds queries, keys and values to float16 (its default F16 KV cache and the
  F16 dot product the attention runs in), `p16` rounds the attention weights to float16 before they multiply the
  values (its F16 KQ x V product).

    KILN_LLAMA_PYTHON=/path/to/python uv run python benchmarks/llm_reference.py [--formats Q8_0,F16] [--size 100m]
        [--prompt 32] [--new 16]

Measured (Dec 2026, llm_bench's 100M file, prompt 32, 16 new ids; the same on the loaded 2-core VM and bit for
bit reproducible): the Q8_0 file's kiln ids equal the float64 reference's, all 17, and so do the F16 file's (which
llama.cpp's equal too). llama.cpp's Q8_0 ids leave the reference's at id 10 (8829 for 4491). There kiln's logits are
within 1.1e-6 of the reference's (largest logit 2.12) and the reference's top two are 4491 (2.12325) and 8829
(2.12081): a margin of 0.0024, the smallest of the 17 steps (the others 0.012 to 0.13). llama.cpp's roundings move
these logits by 0.005 to 0.01: its Q8_0 activations alone by 0.0045 (margin 0.0018), with float16 keys and values
the order flips (8829 ahead by 0.0049), with the float16 attention weights too it flips back (4491 by 0.0021). These
emulations are not llama.cpp's exact path (its flash attention accumulates in float16, for one); they show that its
arithmetic perturbs the logits by twice the margin. So the Q8_0 mismatch is a near-tie tipped by llama.cpp's
lower-precision arithmetic, not a kiln error: kiln computes the dequantized model exactly to float32 rounding.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import dequantize
from llm_bench import SIZES, bench_llama, prompt_ids, write_gguf

Weights = dict[str, np.ndarray]
EMULATIONS = ((), ("q8",), ("kv16",), ("p16",), ("q8", "kv16"), ("q8", "kv16", "p16"))


def load(path: Path) -> tuple[Weights, dict[str, gguf.GGMLQuantizationType]]:
    """Every tensor of the GGUF file at `path` decoded by gguf-py into float64 (row-major, ggml's dims reversed),
    and each tensor's ggml type."""
    reader = gguf.GGUFReader(str(path))
    weights, kinds = {}, {}
    for tensor in reader.tensors:
        shape = tuple(int(size) for size in reversed(tensor.shape.tolist()))
        weights[tensor.name] = dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float64)
        kinds[tensor.name] = gguf.GGMLQuantizationType(tensor.tensor_type)
    return weights, kinds


def q8_0_round_trip(x: np.ndarray) -> np.ndarray:
    """`x` quantized to ggml Q8_0 blocks along its last axis and decoded again: each 32 values share the float16
    scale amax / 127 and are rounded to the nearest integer multiple of it (ggml's quantize_row_q8_0)."""
    blocks = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32)
    scale = np.abs(blocks).max(-1, keepdims=True) / 127
    inverse = np.divide(1, scale, out=np.zeros_like(scale), where=scale != 0)
    quants = np.rint(blocks * inverse)
    decoded: np.ndarray = quants * scale.astype(np.float16).astype(np.float64)
    return decoded.reshape(x.shape)


def to_half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)


def logits(
    weights: Weights, kinds: dict[str, gguf.GGMLQuantizationType], ids: Sequence[int], shape: dict[str, int],
    emulate: Sequence[str] = (),
) -> np.ndarray:  # fmt: skip
    """The last position's logits of token `ids` (float64), with llama.cpp's roundings named in `emulate`."""
    dim, heads, kv_heads = shape["dim"], shape["heads"], shape["kv_heads"]
    head_dim, count = dim // heads, len(ids)

    def product(x: np.ndarray, name: str) -> np.ndarray:
        if "q8" in emulate and kinds[name] == gguf.GGMLQuantizationType.Q8_0:
            x = q8_0_round_trip(x)
        return x @ weights[name].T

    def rms_norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
        normed: np.ndarray = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * gain
        return normed

    angles = np.arange(count)[:, None] * 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]

    def rope(x: np.ndarray) -> np.ndarray:  # (count, heads, head_dim): pairs (2i, 2i + 1) rotated
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
        return out

    h = weights["token_embd.weight"][list(ids)]
    causal = np.triu(np.full((count, count), -np.inf), 1)
    for layer in range(shape["layers"]):
        prefix = f"blk.{layer}."
        x = rms_norm(h, weights[prefix + "attn_norm.weight"])
        q = rope(product(x, prefix + "attn_q.weight").reshape(count, heads, head_dim))
        k = rope(product(x, prefix + "attn_k.weight").reshape(count, kv_heads, head_dim))
        v = product(x, prefix + "attn_v.weight").reshape(count, kv_heads, head_dim)
        if "kv16" in emulate:
            q, k, v = to_half(q), to_half(k), to_half(v)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(head_dim) + causal
        attention = np.exp(scores - scores.max(-1, keepdims=True))
        attention /= attention.sum(-1, keepdims=True)
        if "p16" in emulate:
            attention = to_half(attention)
        mixed = np.einsum("hqk,khd->qhd", attention, v).reshape(count, dim)
        h = h + product(mixed, prefix + "attn_output.weight")
        x = rms_norm(h, weights[prefix + "ffn_norm.weight"])
        gate, up = product(x, prefix + "ffn_gate.weight"), product(x, prefix + "ffn_up.weight")
        h = h + product(gate / (1 + np.exp(-gate)) * up, prefix + "ffn_down.weight")
    last: np.ndarray = product(rms_norm(h[-1:], weights["output_norm.weight"]), "output.weight")[0]
    return last


def greedy(
    weights: Weights, kinds: dict[str, gguf.GGMLQuantizationType], prompt: list[int], new: int,
    shape: dict[str, int],
) -> tuple[list[int], list[float]]:  # fmt: skip
    """The float64 reference's `new + 1` greedy ids after `prompt` and its top-1 minus top-2 logit at each."""
    ids, out, margins = list(prompt), [], []
    for _ in range(new + 1):
        values = logits(weights, kinds, ids, shape)
        second, first = np.argsort(values)[-2:]
        out.append(int(first))
        margins.append(float(values[first] - values[second]))
        ids.append(int(first))
    return out, margins


def kiln_run(path: Path, prompt: list[int], new: int, step: int | None) -> tuple[list[int], np.ndarray | None]:
    """kiln's greedy ids (Generator, as llm_bench decodes) and, for `step`, its logits after prompt + ids[:step]."""
    from kiln.tensor import Tensor
    from kiln.tensor.llm import Generator, load_model

    loaded = load_model(path, max_context=1024)
    ids = list(Generator(loaded).generate(prompt, max_tokens=new + 1))
    if step is None:
        return ids, None
    model = loaded.model
    tokens = np.array([prompt + ids[:step]], np.int32)
    return ids, model.forward_embedded(model.embed(Tensor(tokens)), 0, last_only=True).numpy()[0, -1]


def first_difference(mine: list[int], theirs: list[int]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)


def report(name: str, path: Path, shape: dict[str, int], prompt: list[int], new: int, llama: str | None) -> None:
    weights, kinds = load(path)
    reference, margins = greedy(weights, kinds, prompt, new, shape)
    theirs = None
    if llama is not None:
        got = bench_llama(llama, path, prompt, [], [len(prompt)], new, 1, len(os.sched_getaffinity(0)), 1024)
        theirs = got["ids"][str(len(prompt))]
    step = None if theirs is None else first_difference(reference, theirs)
    mine, kiln_logits = kiln_run(path, prompt, new, step)
    pad = " " * len(name)
    print(f"{name}: kiln      {mine}")
    print(f"{pad}  float64   {reference}  (first difference from kiln: {first_difference(mine, reference)})")
    if theirs is not None:
        print(f"{pad}  llama.cpp {theirs}  (first difference from the reference: {step})")
    print(f"{pad}  float64 top-1 minus top-2 logit per step: {json.dumps([round(m, 5) for m in margins])}")
    if step is None or theirs is None or kiln_logits is None:
        return
    context = prompt + reference[:step]
    exact = logits(weights, kinds, context, shape)
    ours, other = reference[step], theirs[step]
    print(f"  at id {step}: max |kiln - float64| over the vocabulary {np.abs(kiln_logits - exact).max():.2e}")
    for emulate in EMULATIONS:
        values = exact if not emulate else logits(weights, kinds, context, shape, emulate)
        label = "+".join(emulate) or "float64"
        print(f"    {label:12s} logit {ours}: {values[ours]:.5f}  logit {other}: {values[other]:.5f}  "
              f"argmax {int(values.argmax())}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--formats", default="Q8_0,F16", help="ggml types, or Q4_K_M (llama.cpp's mix)")
    parser.add_argument("--prompt", type=int, default=32, help="prompt length (llm_bench's prompt ids)")
    parser.add_argument("--new", type=int, default=16, help="greedy ids after the first")
    parser.add_argument("--llama-python", help="a Python with llama_cpp (default: $KILN_LLAMA_PYTHON)")
    args = parser.parse_args()
    llama = args.llama_python or os.environ.get("KILN_LLAMA_PYTHON")
    if llama is None:
        print("llama.cpp: skipped (give --llama-python or set KILN_LLAMA_PYTHON)")
    shape = SIZES[args.size]
    prompt = prompt_ids(shape["vocab"], args.prompt)
    with tempfile.TemporaryDirectory() as folder:
        for name in args.formats.split(","):
            path = Path(folder) / f"reference-{name.lower()}.gguf"
            write_gguf(path, shape, name, no_vocab=True)
            report(name, path, shape, prompt, args.new, llama)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
