"""`python -m kiln.tensor.llm`: chat with a local model, run one prompt, or serve the OpenAI-compatible API.

    python -m kiln.tensor.llm --model PATH                      interactive chat (the model's chat format)
    python -m kiln.tensor.llm --model PATH --prompt TEXT        one completion of the raw prompt (--chat: as a chat)
    python -m kiln.tensor.llm serve --model PATH --port N       the HTTP server (kiln.tensor.llm.server)

`--max-context N` (both) sizes the KV cache: prompt plus completion fit N positions (default min(trained, 4096)).
`serve` listens on 127.0.0.1 unless `--host` says otherwise; its limits (`--api-key`, `--allow-host`,
`--max-body-bytes`, `--max-queue`, `--max-batch`, `--prefill-chunk`, `--max-connections`, `--read-timeout`,
`--shutdown-grace`) are `kiln.tensor.llm.openai_api.ServerLimits`; `--max-batch` requests decode together
(continuous batching), a joining prompt prefilled `--prefill-chunk` tokens between two decode steps, their KV
memory one paged pool shared by every request (`kv_pool.py`; `--kv-blocks N` blocks of 16 rows, by default the
memory of max-batch requests of the whole context; prefix blocks reused across requests and turns) or, with
`--kv-layout slots`, max-batch x max-context rows reserved per request slot.

Generated text goes to stdout as it is produced; prefill and decode speeds (tokens/s) go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from kiln.tensor.llm.arguments import context_argument, int_at_least
from kiln.tensor.llm.paged_cache import default_kv_blocks
from kiln.tensor.llm.server import ServerLimits, serve
from kiln.tensor.llm.session import ChatModel, Completion, load_chat_model

__all__ = ["main"]


_positive_int = int_at_least(0, "a non-negative integer")
_at_least_one = int_at_least(1, "an integer >= 1")


def _sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0 = greedy (default)")
    parser.add_argument("--top-k", type=_positive_int, default=0, help="keep the k likeliest tokens (0 = all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1] (default 1)")
    parser.add_argument("--seed", type=int, default=None, help="random seed of the sampler")


def _chat_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.tensor.llm",
        description="Run a llama-family model from a .gguf file or a safetensors folder "
        "('serve --model PATH --port N' starts the OpenAI-compatible server).",
    )
    parser.add_argument("--model", required=True, help="a .gguf file, or a folder with config.json + *.safetensors")
    parser.add_argument("--prompt", help="one raw prompt (no chat template unless --chat); omit for a chat session")
    parser.add_argument("--chat", action="store_true", help="send --prompt as a user message in the chat format")
    parser.add_argument("--system", default=None, help="a system message for chat")
    parser.add_argument("--chat-template", default=None, help="a Jinja chat template file (default: the model's)")
    parser.add_argument("--max-tokens", type=_positive_int, default=256, help="at most this many new tokens")
    context_argument(parser)
    _sampling_arguments(parser)
    return parser


def _positive_number(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _serve_parser() -> argparse.ArgumentParser:
    defaults = ServerLimits()
    parser = argparse.ArgumentParser(
        prog="python -m kiln.tensor.llm serve", description="An OpenAI-compatible HTTP server for one local model."
    )
    parser.add_argument("--model", required=True, help="a .gguf file, or a folder with config.json + *.safetensors")
    parser.add_argument("--chat-template", default=None, help="a Jinja chat template file (default: the model's)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0 = any free one)")
    context_argument(parser)
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (all routes but /health)")
    parser.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="also answer requests whose Host header names NAME (repeatable; '*': any); by default only localhost, "
        "127.0.0.1, [::1] and the --host address are answered, against DNS rebinding",
    )  # fmt: skip
    limits = [
        ("--max-body-bytes", _at_least_one, defaults.max_body_bytes, "largest request body (default %(default)s; 413)"),
        ("--max-queue", _at_least_one, defaults.max_queue, "requests waiting for a slot (default %(default)s; 429)"),
        ("--max-batch", _at_least_one, defaults.max_batch, "requests decoded together (default %(default)s)"),
        (
            "--prefill-chunk",
            _at_least_one,
            defaults.prefill_chunk,
            "prompt tokens prefilled between two decode steps (default %(default)s)",
        ),
        ("--max-connections", _at_least_one, defaults.max_connections, "connections served at once (%(default)s)"),
        (
            "--read-timeout",
            _positive_number,
            defaults.read_timeout,
            "seconds for a request's headers, then its body (default %(default)s)",
        ),
        (
            "--shutdown-grace",
            _positive_number,
            defaults.shutdown_grace,
            "seconds requests in flight get at Ctrl-C or SIGTERM (default %(default)s)",
        ),
    ]
    for option, kind, default, help_text in limits:
        parser.add_argument(option, type=kind, default=default, help=help_text)
    parser.add_argument(
        "--kv-layout", choices=["paged", "slots"], default="paged",
        help="paged (default): one KV pool of 16-row blocks shared by all requests, prefix blocks reused across "
        "requests and turns; slots: max-batch x context rows reserved per request slot",
    )  # fmt: skip
    parser.add_argument(
        "--kv-blocks", type=_at_least_one, default=None, metavar="N",
        help="the paged pool's blocks of 16 rows (default: what max-batch requests of the whole context fill, plus "
        "one per request and the scratch block: the slot layout's memory)",
    )  # fmt: skip
    return parser


def _serve(argv: Sequence[str], err: TextIO) -> int:
    args = _serve_parser().parse_args(argv)
    if args.api_key is not None and not args.api_key.strip():
        print("error: --api-key must not be empty", file=err)
        return 2
    limits = ServerLimits(
        max_body_bytes=args.max_body_bytes, max_queue=args.max_queue, max_batch=args.max_batch,
        prefill_chunk=args.prefill_chunk, max_connections=args.max_connections,
        read_timeout=args.read_timeout, shutdown_grace=args.shutdown_grace, api_key=args.api_key,
        allowed_hosts=tuple(args.allow_host),
    )  # fmt: skip
    layout = args.kv_layout
    if layout == "slots" and args.kv_blocks is not None:
        print("error: --kv-blocks sizes the paged pool; it does not go with --kv-layout slots", file=err)
        return 2
    try:
        model = load_chat_model(
            args.model, max_context=args.max_context, chat_template=args.chat_template, kv_blocks=args.kv_blocks
        )
    except (FileNotFoundError, ValueError, OSError) as error:
        print(f"error: cannot load the model: {error}", file=err)
        return 1
    if layout == "paged" and model.kv_blocks is None:
        model.kv_blocks = default_kv_blocks(args.max_batch, model.context_length)
    return serve(model, args.host, args.port, limits, err)


def _report(result: Completion, err: TextIO) -> None:
    stats = result.stats
    print(
        f"\n[prefill {stats.prefill_tokens} tokens, {stats.prefill_tokens_per_second:.1f} tok/s; "
        f"decode {stats.decode_tokens} tokens, {stats.decode_tokens_per_second:.1f} tok/s; "
        f"finish: {result.finish_reason}"
        + (f"; {stats.cached_tokens} prompt tokens reused from the cache" if stats.cached_tokens else "")
        + "]",
        file=err,
        flush=True,
    )


def _run(model: ChatModel, prompt_ids: list[int], args: argparse.Namespace, out: TextIO, err: TextIO) -> Completion:
    room = model.context_length - len(prompt_ids)
    if room <= 0:
        raise ValueError(f"the prompt has {len(prompt_ids)} tokens; the model's context is {model.context_length}")
    result = Completion()
    deltas = model.stream_text(
        prompt_ids, result, max_tokens=min(args.max_tokens, room), temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed,
    )  # fmt: skip
    for delta in deltas:
        out.write(delta)
        out.flush()
    _report(result, err)
    return result


def _chat_loop(model: ChatModel, args: argparse.Namespace, inp: TextIO, out: TextIO, err: TextIO) -> None:
    messages: list[dict[str, object]] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    print(f"[{model.name}: chat format {model.template.family}; empty line or Ctrl-D to quit]", file=err, flush=True)
    while True:
        out.write("> ")
        out.flush()
        line = inp.readline()
        if not line or not line.strip():
            return
        messages.append({"role": "user", "content": line.rstrip("\n")})
        result = _run(model, model.encode_chat(messages), args, out, err)
        out.write("\n")
        messages.append({"role": "assistant", "content": result.text})


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    """The command line; returns the exit status (2 for usage errors, 1 for a model that cannot be loaded)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    inp, out, err = stdin or sys.stdin, stdout or sys.stdout, sys.stderr
    if args_list[:1] == ["serve"]:
        return _serve(args_list[1:], err)
    args = _chat_parser().parse_args(args_list)
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        print(f"error: need --temperature >= 0 and 0 < --top-p <= 1, got {args.temperature}, {args.top_p}", file=err)
        return 2
    try:
        model = load_chat_model(args.model, max_context=args.max_context, chat_template=args.chat_template)
    except (FileNotFoundError, ValueError, OSError) as error:
        print(f"error: cannot load the model: {error}", file=err)
        return 1
    try:
        if args.prompt is None:
            _chat_loop(model, args, inp, out, err)
        else:
            messages = [{"role": "system", "content": args.system}] if args.system else []
            ids = (
                model.encode_chat([*messages, {"role": "user", "content": args.prompt}])
                if args.chat
                else (model.encode_prompt(args.prompt))
            )
            _run(model, ids, args, out, err)
            out.write("\n")
    except ValueError as error:
        print(f"error: {error}", file=err)
        return 1
    except KeyboardInterrupt:
        print("\n[interrupted]", file=err)
        return 130
    return 0
