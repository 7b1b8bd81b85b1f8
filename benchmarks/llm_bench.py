"""kiln.tensor.llm prefill and decode tokens/s on a random-weight llama model, against llama.cpp and transformers.

The model (default about 100M parameters: dim 768, 12 layers, FFN 2048, 12 heads / 4 KV heads, vocab 32000) is
written as GGUF files (F16, Q8_0 and Q4_K_M by default: `--formats`) into a temporary folder and loaded by
`load_model`. The `gguf` package writes F16 and Q8_0; Q4_K and Q6_K blocks are encoded here (gguf-py has no K-quant
encoder), with llama.cpp's Q4_K_M mix: Q6_K for output.weight and for attn_v / ffn_down of the layers llama.cpp
gives more bits, Q4_K elsewhere. kiln generates with `Generator`.

References: llama.cpp (the `llama-cpp-python` package) on the same GGUF file with as many threads as kiln uses
(the CPUs this process may run on; `--threads`), run by `--llama-python PATH` (default: this Python if it imports
`llama_cpp`, else $KILN_LLAMA_PYTHON; skipped with a message when neither has it). Its prefill is one `eval` of the
prompt, its decode one `eval` per token with the argmax of the last logits; the greedy ids of each decode run are
compared with kiln's and a mismatch is printed (`--llama-omp-wait`: OMP_WAIT_POLICY of its threads, passive by
default: see `bench_llama`). Each format row gets its kiln / llama.cpp ratio, and the ratio of process CPU time
per token (llama.cpp's over kiln's: above 1, kiln spends less), which a machine busier than its cores distorts far
less than wall time (set CPU_SPIN=0, else kiln's polling workers count; llama.cpp's passive wait sleeps). transformers'
LlamaForCausalLM (float32, eager, KV cache) of the same shape and random weights of its own runs under a Python that
has torch (`--torch-python PATH`; skipped when not given). Each format is measured in a fresh process; figures are
medians over `--runs`, with each process's peak RSS.

    uv run python benchmarks/llm_bench.py [--size 100m|small] [--runs 3] [--formats F16,Q8_0,Q4_K_M]
        [--llama-python /path/to/python] [--torch-python /path/to/python]

Prefill is measured per prompt length of `--prompts` (default 64,200,500): the first prompt of that length (compile
included, after a warm-up with another length) and the median tokens/s of the runs after it. Decode is measured
after a prompt of each length of `--positions` (default 32,900): `--new` tokens from that position on, so its cost
shows whether attention reads the positions so far or the whole cache. `--context N` is the trained context written
into the GGUF (default 2048), `--max-context N` the KV cache kiln allocates (default 1024; 0: kiln's default,
min(trained, 4096)); `--temperature T` decodes by sampling (seeded) instead of greedily.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
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

LLAMA_SCRIPT = r"""
import ctypes, json, resource, statistics, sys, time
import numpy as np
import llama_cpp, llama_cpp.llama_cpp as low
path, ids, prompts, positions, new, runs, threads, context, extra_buffers = json.loads(sys.argv[1])
if not extra_buffers:  # no repacked / AMX weight buffers (the AMX matmul crashed where the OS gave no AMX state)
    defaults = low.llama_model_default_params
    def model_params():
        params = defaults()
        params.use_extra_bufts = False
        return params
    low.llama_model_default_params = model_params
batch = max(prompts + positions)
llm = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=context, n_batch=batch,
    n_ubatch=batch, logits_all=False, verbose=False)
vocab = llm.n_vocab()

def argmax():  # greedy: the last evaluated position's logits (llama.cpp's own buffer, no copy)
    logits = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return int(np.ctypeslib.as_array(ctypes.cast(logits, ctypes.POINTER(ctypes.c_float)), shape=(vocab,)).argmax())

def prefill(tokens):
    llm.reset()
    started, cpu_started = time.perf_counter(), time.process_time()
    llm.eval(tokens)
    return time.perf_counter() - started, time.process_time() - cpu_started

prefill(ids[:7])  # warm-up, like kiln's
result = {"prefill": {}, "decode": {}, "ids": {}, "cpu_ms": {"prefill": {}, "decode": {}}}
for length in prompts:
    times = [prefill(ids[:length]) for _ in range(runs + 1)]
    result["prefill"][length] = {"first": times[0][0], "tok_s": length / statistics.median(t for t, _ in times[1:])}
    result["cpu_ms"]["prefill"][length] = 1e3 * statistics.median(cpu for _, cpu in times[1:]) / length
for position in positions:
    rates, cpus = [], []
    for _ in range(runs):
        prefill(ids[:position])
        out = [argmax()]
        started, cpu_started = time.perf_counter(), time.process_time()
        for _ in range(new):
            llm.eval(out[-1:])
            out.append(argmax())
        rates.append(new / (time.perf_counter() - started))
        cpus.append(1e3 * (time.process_time() - cpu_started) / new)
    result["decode"][position] = statistics.median(rates)
    result["cpu_ms"]["decode"][position] = statistics.median(cpus)
    result["ids"][position] = out
result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result["version"] = llama_cpp.__version__
result["extra_buffers"] = extra_buffers
print(json.dumps(result))
"""

QK_K = 256


def _q4_k_blocks(values: np.ndarray) -> np.ndarray:
    """ggml block_q4_K bytes of float32 rows (whole 256-blocks): per block the f16 d and dmin, 12 bytes of 6-bit
    sub-block scales and mins, 128 bytes of nibbles; a value decodes as d * scale * q - dmin * min of its 32-run."""
    runs = values.reshape(-1, 8, 32).astype(np.float32)
    low = np.minimum(runs.min(-1), 0.0)
    steps = (runs.max(-1) - low) / 15
    d = (steps.max(-1, keepdims=True) / 63).astype(np.float16)
    dmin = (-low.min(-1, keepdims=True) / 63).astype(np.float16)
    scales = np.clip(np.rint(steps / np.where(d == 0, 1, d.astype(np.float32))), 0, 63).astype(np.uint8)
    mins = np.clip(np.rint(-low / np.where(dmin == 0, 1, dmin.astype(np.float32))), 0, 63).astype(np.uint8)
    step = d.astype(np.float32) * scales
    offset = (dmin.astype(np.float32) * mins)[..., None]
    quants = np.clip(np.rint((runs + offset) / np.where(step == 0, 1, step)[..., None]), 0, 15).astype(np.uint8)
    packed = np.concatenate(
        [
            scales[:, :4] | ((scales[:, 4:] >> 4) << 6),  # ggml's get_scale_min_k4 read backwards
            mins[:, :4] | ((mins[:, 4:] >> 4) << 6),
            (scales[:, 4:] & 0xF) | ((mins[:, 4:] & 0xF) << 4),
        ],
        axis=1,
    )
    pairs = quants.reshape(-1, 4, 2, 32)  # 32 bytes per pair of runs: the first run's low nibbles, the second's high
    nibbles = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(-1, 128)
    return np.concatenate([d.view(np.uint8), dmin.view(np.uint8), packed, nibbles], axis=1)


def _q6_k_blocks(values: np.ndarray) -> np.ndarray:
    """ggml block_q6_K bytes: 128 bytes of low nibbles, 64 of 2-bit high parts, 16 int8 scales of 16-runs, f16 d; a
    value decodes as d * scale * (q - 32)."""
    runs = values.reshape(-1, 16, 16).astype(np.float32)
    steps = np.abs(runs).max(-1) / 31
    d = (steps.max(-1, keepdims=True) / 127).astype(np.float16)
    scales = np.clip(np.rint(steps / np.where(d == 0, 1, d.astype(np.float32))), -128, 127).astype(np.int8)
    step = d.astype(np.float32) * scales
    quants = np.clip(np.rint(runs / np.where(step == 0, 1, step)[..., None]), -32, 31).astype(np.int16) + 32
    q = quants.astype(np.uint8).reshape(-1, 2, 4, 32)  # element 128 h + 32 k + l
    low, high = q & 0xF, q >> 4
    ql = np.concatenate([low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2)
    qh = high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), scales.view(np.uint8), d.view(np.uint8)], axis=1)


def _q4_k_m_type(name: str, layers: int) -> gguf.GGMLQuantizationType:
    """llama.cpp's Q4_K_M choice for a tensor (llama_tensor_get_type): Q6_K for output.weight and for attn_v /
    ffn_down of the first and last eighth of the layers and every third one between, Q4_K elsewhere."""
    if name == "output.weight":
        return gguf.GGMLQuantizationType.Q6_K
    if name.endswith(("attn_v.weight", "ffn_down.weight")):
        layer, eighth = int(name.split(".")[1]), layers // 8
        if layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2:
            return gguf.GGMLQuantizationType.Q6_K
    return gguf.GGMLQuantizationType.Q4_K


def _encode(value: np.ndarray, kind: gguf.GGMLQuantizationType) -> np.ndarray:
    """`value`'s ggml bytes, shaped (rows, bytes per row) as GGUFWriter takes raw quantized data."""
    if kind == gguf.GGMLQuantizationType.Q4_K:
        return _q4_k_blocks(value).reshape(value.shape[0], -1)
    if kind == gguf.GGMLQuantizationType.Q6_K:
        return _q6_k_blocks(value).reshape(value.shape[0], -1)
    return gguf.quants.quantize(value, kind)


def write_gguf(
    path: Path, shape: dict[str, int], kind: gguf.GGMLQuantizationType | str, context: int = CONTEXT,
    no_vocab: bool = False,
) -> None:  # fmt: skip
    """The random-weight llama of `shape` as a GGUF file of format `kind` (a ggml type, or "Q4_K_M": llama.cpp's
    mix). `no_vocab` writes tokenizer.ggml.model "no_vocab" (llama.cpp then loads a file without a tokenizer)."""
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
    if no_vocab:
        writer.add_tokenizer_model("no_vocab")
    mixed = kind == "Q4_K_M"
    if isinstance(kind, str) and not mixed:
        kind = gguf.GGMLQuantizationType[kind]

    def add(name: str, *dims: int) -> None:
        if len(dims) == 1:
            writer.add_tensor(name, np.ones(dims, np.float32))
            return
        value = (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float32)
        chosen = _q4_k_m_type(name, shape["layers"]) if mixed else kind
        assert isinstance(chosen, gguf.GGMLQuantizationType)
        if chosen == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, value.astype(np.float16))
        else:
            writer.add_tensor(name, _encode(value, chosen), raw_dtype=chosen)

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


def prompt_ids(vocab: int, count: int) -> list[int]:
    """The benchmark's prompt: `count` seeded random token ids (kiln and llama.cpp read the same)."""
    return [int(token) for token in np.random.default_rng(1).integers(0, vocab, count)]


def llama_python(given: str | None) -> str | None:
    """The Python that runs llama.cpp: `given`, else this one if it imports llama_cpp, else $KILN_LLAMA_PYTHON."""
    if given:
        return given
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    return os.environ.get("KILN_LLAMA_PYTHON") or None


def bench_llama(
    python: str, path: Path, ids: list[int], prompts: list[int], positions: list[int], new: int, runs: int,
    threads: int, context: int, omp_wait: str = "passive",
) -> dict[str, Any]:  # fmt: skip
    """llama.cpp's figures on the GGUF file at `path` (LLAMA_SCRIPT in a fresh process of `python`). A crash with
    llama.cpp's extra weight buffers (repacked layouts, AMX: ggml's AMX matmul segfaults on a VM that enables the
    AMX CPU flags without granting the tile state) is retried without them, which the result records. `omp_wait`
    sets OMP_WAIT_POLICY for llama.cpp's OpenMP threads ("default": left alone): spinning threads collapse on a
    machine busier than its cores (the 100M Q8_0 file on the loaded 2-core VM: decode 1 tok/s active, 15 passive)."""
    env = dict(os.environ)
    if omp_wait != "default":
        env["OMP_WAIT_POLICY"] = omp_wait.upper()
    for extra_buffers in (True, False):
        payload = json.dumps([str(path), ids, prompts, positions, new, runs, threads, context, extra_buffers])
        done = subprocess.run([python, "-c", LLAMA_SCRIPT, payload], capture_output=True, text=True, env=env)
        if done.returncode != -11:  # SIGSEGV
            break
    if done.returncode:
        raise RuntimeError(f"llama.cpp under {python} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def _ratios(kiln: dict[str, Any], llama: dict[str, Any]) -> str:
    """kiln's tokens/s over llama.cpp's, per prompt length and decode position (JSON turned the keys to strings)."""
    prefill = "  ".join(
        f"{length}: {row['tok_s'] / llama['prefill'][str(length)]['tok_s']:.2f}x"
        for length, row in kiln["prefill"].items()
    )
    decode = "  ".join(
        f"pos {position}: {rate / llama['decode'][str(position)]:.2f}x" for position, rate in kiln["decode"].items()
    )
    if "cpu_ms" not in kiln or "cpu_ms" not in llama:
        return f"prefill {prefill}  decode {decode}"
    cpu = "  ".join(
        f"{stage} {key}: {llama['cpu_ms'][stage][str(key)] / mine:.2f}x"
        for stage in ("prefill", "decode")
        for key, mine in kiln["cpu_ms"][stage].items()
    )
    return f"prefill {prefill}  decode {decode}  |  CPU time per token, llama.cpp's over kiln's: {cpu}"


def _same_ids(kiln: dict[str, Any], llama: dict[str, Any]) -> str:
    """Whether kiln's greedy ids equal llama.cpp's after each position; the first mismatch is named."""
    verdicts = []
    for position, mine in kiln["ids"].items():
        theirs = llama["ids"][str(position)]
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        if first is None and len(mine) == len(theirs):
            verdicts.append(f"pos {position}: {len(mine)} ids equal")
        else:
            first = min(len(mine), len(theirs)) if first is None else first
            verdicts.append(
                f"pos {position}: MISMATCH at id {first} (kiln {mine[first : first + 3]}, llama.cpp "
                f"{theirs[first : first + 3]})"
            )
    return "  ".join(verdicts)


def bench_kiln(
    path: Path, prompts: list[int], positions: list[int], new: int, runs: int, max_context: int | None,
    temperature: float,
) -> dict[str, Any]:  # fmt: skip
    """Prefill figures per prompt length (the first prompt of that length, compile included, then the median
    tokens/s of `runs` more) and decode tokens/s after a prompt of each position's length, in this process."""
    from kiln.tensor.llm import Generator, load_model

    try:
        loaded = load_model(path, max_context=max_context)
    except TypeError:  # a kiln from before --max-context: its cache spans the trained context
        loaded = load_model(path)
    generator = Generator(loaded)
    ids = prompt_ids(loaded.config.vocab_size, max(prompts + positions))
    sampling = {"temperature": temperature, "top_k": 40, "top_p": 0.95} if temperature else {}
    list(generator.generate(ids[:7], max_tokens=4, **sampling))  # warm-up: a prompt length measured nowhere
    result: dict[str, Any] = {"prefill": {}, "decode": {}, "cpu_ms": {"prefill": {}, "decode": {}}}
    for length in prompts:
        generator.reset()  # every prefill measured here starts from an empty cache (no prefix reuse)
        started = time.perf_counter()
        list(generator.generate(ids[:length], max_tokens=1, **sampling))
        first = time.perf_counter() - started
        rates, cpus = [], []
        for run in range(runs):
            generator.reset()
            cpu_started = time.process_time()
            list(generator.generate(ids[:length], max_tokens=1, seed=run, **sampling))  # type: ignore[arg-type]
            cpus.append(1e3 * (time.process_time() - cpu_started) / length)
            rates.append(generator.last_stats.prefill_tokens_per_second)
        result["prefill"][length] = {"first": first, "tok_s": statistics.median(rates)}
        result["cpu_ms"]["prefill"][length] = statistics.median(cpus)
    result["ids"] = {}
    for position in positions:
        rates, cpus = [], []
        for run in range(runs):
            tokens = generator.generate(ids[:position], max_tokens=new + 1, seed=run, **sampling)  # type: ignore[arg-type]
            out = [next(tokens)]  # the prompt's token: the decode's CPU time starts after it
            cpu_started = time.process_time()
            out += list(tokens)
            cpus.append(1e3 * (time.process_time() - cpu_started) / max(len(out) - 1, 1))
            rates.append(generator.last_stats.decode_tokens_per_second)
        result["decode"][position] = statistics.median(rates)
        result["cpu_ms"]["decode"][position] = statistics.median(cpus)
        result["ids"][position] = out
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
    if "cpu_ms" in got:
        cpu = "  ".join(
            f"{stage} {key}: {ms:.2f}" for stage in ("prefill", "decode") for key, ms in got["cpu_ms"][stage].items()
        )
        print(f"{' ' * len(who)}  CPU ms per token  {cpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="100m")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompts", default="64,200,500", help="prompt lengths whose prefill is measured")
    parser.add_argument("--positions", default="32,900", help="decode is measured after a prompt of each length")
    parser.add_argument("--new", type=int, default=16, help="decoded tokens per run")
    parser.add_argument("--formats", default="F16,Q8_0,Q4_K_M", help="ggml types, or Q4_K_M (llama.cpp's mix)")
    parser.add_argument("--context", type=int, default=CONTEXT, help="the trained context written into the GGUF")
    parser.add_argument("--max-context", type=int, default=1024, help="kiln's KV cache positions (0: kiln's default)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sample (top-k 40, top-p 0.95); 0: greedy")
    parser.add_argument("--torch-python", help="a Python with torch and transformers (reference; omitted: skipped)")
    parser.add_argument("--llama-python", help="a Python with llama_cpp (default: this one, else $KILN_LLAMA_PYTHON)")
    parser.add_argument("--llama-omp-wait", choices=["passive", "active", "default"], default="passive")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="llama.cpp's (kiln's CPUs)")
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
    llama = llama_python(args.llama_python)
    if llama is None:
        print("llama.cpp: skipped (no llama_cpp in this Python; give --llama-python or set KILN_LLAMA_PYTHON)")
    ids = prompt_ids(shape["vocab"], max(prompts + positions))
    with tempfile.TemporaryDirectory() as folder:
        for name in args.formats.split(","):
            path = Path(folder) / f"bench-{name.lower()}.gguf"
            write_gguf(path, shape, name, args.context, no_vocab=True)
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
            _report(f"kiln {name:6s}", got, extra)
            if llama is None:
                continue
            context = args.max_context or args.context
            theirs = bench_llama(
                llama, path, ids, prompts, positions, args.new, args.runs, args.threads, context, args.llama_omp_wait
            )
            setup = f"{args.threads} threads, OpenMP wait {args.llama_omp_wait}"
            setup += "" if theirs["extra_buffers"] else ", no extra buffers"
            _report(f"llama.cpp {theirs['version']} {name} ({setup})", theirs, "")
            print(f"  kiln / llama.cpp {name}: {_ratios(got, theirs)}")
            if not args.temperature:
                print(f"  greedy ids, kiln vs llama.cpp: {_same_ids(got, theirs)}")
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
