"""Reading an OpenAI request: a body validated into the jobs to queue (kiln.tensor.llm.openai_api runs them).

`RequestReader.prepare` checks a chat or completion body (its model, prompt, limits, sampling options and output
options, kiln.tensor.llm.request_format) and makes a `Request` of `n` jobs, one per choice, each with its own
`TokenConstraint` when the output is constrained (JSON mode, a JSON schema, a forced tool call; the vocabulary's
grammar index is made at the first such request and kept). With a seed, choice 0 draws with that seed and choice i
with one derived from (seed, i), so every choice is reproducible. `prepare_embeddings` does the same for
`/v1/embeddings`. A refused request raises `RequestError`, whose `body()` is OpenAI's error shape.

A prompt is measured in bytes before it is tokenized: a text longer than the context times the most bytes one token
of the vocabulary can stand for cannot fit, and is refused without spending the CPU time of tokenizing it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.tensor.llm.chat_template import validate_messages
from kiln.tensor.llm.json_grammar import TokenConstraint, Vocabulary
from kiln.tensor.llm.logprobs import TokenLogprob
from kiln.tensor.llm.request_format import FormatError, RequestFormat, parse_format
from kiln.tensor.llm.session import ChatModel, Completion

__all__ = ["Job", "Piece", "Request", "RequestError", "RequestReader", "shutting_down_error"]

_MAX_SEED = 2**63 - 1


class RequestError(Exception):
    """A request that cannot be served: the HTTP status, OpenAI's error fields and extra response headers."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


def shutting_down_error() -> RequestError:
    """The 503 of a request refused or failed because the server is shutting down."""
    return RequestError(503, "the server is shutting down", code="server_shutting_down", headers={"Retry-After": "5"})


Piece = tuple[str, list[TokenLogprob]]  # a text delta and the log-probability records of its tokens


@dataclass
class Job:
    """One generation (one choice of a request) waiting for (or being served by) the worker; its output arrives on
    `out` as (index, item): a `Piece`, an exception, or the end marker."""

    prompt_ids: list[int]
    options: dict[str, Any]
    out: queue.Queue[Any] = field(default_factory=queue.Queue)
    index: int = 0
    result: Completion = field(default_factory=Completion)
    client_gone: Callable[[], bool] = lambda: False  # set by the transport: whether the client has left
    abandoned: bool = False  # the response's writer stopped reading `out`
    queued_at: float = 0.0
    started_at: float = 0.0
    first_text_at: float | None = None
    embed_inputs: list[list[int]] | None = None  # an embeddings job: the token ids of its inputs

    def left(self) -> bool:
        return self.abandoned or self.client_gone()

    def put(self, item: Any) -> None:
        self.out.put((self.index, item))


@dataclass
class Request:
    """A validated request: its jobs (one per choice, sharing one output queue), whether it streams, its options."""

    jobs: list[Job]
    chat: bool
    stream: bool
    format: RequestFormat

    def watch(self, client_gone: Callable[[], bool]) -> None:
        """Tells every job how to learn that the client has left."""
        for job in self.jobs:
            job.client_gone = client_gone


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"'{name}' must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


class RequestReader:
    """Validates request bodies for one model into jobs (`prepare`, `prepare_embeddings`)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        # Each token stands for at most its longest text's bytes, plus one (SentencePiece drops a word's leading
        # space when decoding one token), times 4 for normalizers that fold characters: a prompt with more bytes
        # than the context times that cannot fit, and is refused before it is tokenized.
        tokenizer = model.tokenizer
        alone = tokenizer.backend.decode_batch([[i] for i in range(tokenizer.vocab_size)], skip_special_tokens=False)
        longest = max((len(text.encode()) for text in alone), default=1)
        self.max_prompt_bytes = model.context_length * 4 * (longest + 1)
        self._vocabulary: Vocabulary | None = None  # made for the first constrained request
        self._vocabulary_lock = threading.Lock()  # its own lock: the enqueues must not wait for the vocabulary

    def addressed_to_me(self, body: Any) -> dict[str, Any]:
        """`body` as a JSON object whose `model` is this server's (a 400 or 404 RequestError otherwise)."""
        if not isinstance(body, dict):
            raise RequestError(400, f"the request body must be a JSON object, got {type(body).__name__}")
        model = body.get("model")
        if not isinstance(model, str):
            raise RequestError(400, "'model' is required (a string)", "model")
        if model != self.model.name:
            raise RequestError(404, f"the model {model!r} does not exist; this server has {self.model.name!r}",
                               "model", "model_not_found")  # fmt: skip
        return body

    def prepare(self, body: Any, chat: bool) -> Request:
        """Validates a request body into the request to queue (its jobs, whether it streams, its output options)."""
        body = self.addressed_to_me(body)
        param = "messages" if chat else "prompt"
        try:
            output = parse_format(body, chat)
        except FormatError as error:
            raise RequestError(400, str(error), error.param) from None
        try:
            if chat:
                messages = validate_messages(body.get("messages"))
                self.check_bytes(sum(len(str(m.get("content") or "").encode()) for m in messages), param)
                tools = [dict(tool) for tool in output.tools.values()] or None
                prompt_ids = self.model.encode_chat(messages, tools=tools)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                    prompt = prompt[0]
                if not isinstance(prompt, str) or not prompt:
                    raise RequestError(400, f"'prompt' must be a non-empty string, got {prompt!r:.80}", "prompt")
                self.check_bytes(len(prompt.encode()), param)
                prompt_ids = self.model.encode_prompt(prompt)
        except ValueError as error:
            raise RequestError(400, str(error), param) from None
        room = self.model.context_length - len(prompt_ids)
        if room <= 0:
            raise RequestError(400, f"the prompt has {len(prompt_ids)} tokens; the model's context length is "
                               f"{self.model.context_length}", param, "context_length_exceeded")  # fmt: skip
        limit_name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
        max_tokens = body.get(limit_name, None if chat else 16)
        if max_tokens is None:
            max_tokens = room
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise RequestError(400, f"'{limit_name}' must be a non-negative integer, got {max_tokens!r}", limit_name)
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise RequestError(400, f"'stop' must be a string or a list of up to 4 strings, got {stop!r:.80}", "stop")
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED):
            raise RequestError(400, f"'seed' must be an integer in [0, 2**63 - 1], got {seed!r:.40}", "seed")
        options = {
            "max_tokens": min(max_tokens, room),
            "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
            "top_p": _number(body, "top_p", 1.0, 1e-9, 1.0),
            "top_k": 0,
            "stop": stop,
            "logprobs": output.logprobs,
        }
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError(400, f"'stream' must be true or false, got {stream!r}", "stream")
        out: queue.Queue[Any] = queue.Queue()
        jobs = []
        for index in range(output.n):
            constraint = None if output.grammar is None else TokenConstraint(output.grammar, self.vocabulary)
            job_seed = seed if seed is None or index == 0 else _choice_seed(seed, index)
            jobs.append(Job(prompt_ids, {**options, "seed": job_seed, "constraint": constraint}, out, index))
        return Request(jobs, chat, stream, output)

    @property
    def vocabulary(self) -> Vocabulary:
        """The token texts for grammar masks (made once, at the first constrained request)."""
        with self._vocabulary_lock:
            if self._vocabulary is None:
                self._vocabulary = Vocabulary.of(self.model.tokenizer, self.model.loaded.config.vocab_size)
            return self._vocabulary

    def prepare_embeddings(self, body: Any) -> Job:
        """Validates an embeddings request body (input: a string, strings, token ids, or lists of token ids) into
        the job to queue (its `options` hold `encoding_format`)."""
        body = self.addressed_to_me(body)
        given = body.get("input")
        if isinstance(given, str) or (isinstance(given, list) and given and all(_is_id(i) for i in given)):
            given = [given]
        if not isinstance(given, list) or not given or len(given) > 2048:
            raise RequestError(400, f"'input' must be a string, a list of 1 to 2048 strings, token ids or lists of "
                               f"token ids, got {given!r:.80}", "input")  # fmt: skip
        vocab, inputs = self.model.loaded.config.vocab_size, []
        for position, item in enumerate(given):
            if isinstance(item, str) and item:
                self.check_bytes(len(item.encode()), "input")
                ids = self.model.encode_prompt(item)
            elif isinstance(item, list) and item and all(_is_id(i) and i < vocab for i in item):
                ids = list(item)
            else:
                raise RequestError(400, f"input[{position}] must be a non-empty string or list of token ids in [0, "
                                   f"{vocab}), got {item!r:.80}", "input")  # fmt: skip
            if len(ids) > self.model.context_length:
                raise RequestError(400, f"input[{position}] has {len(ids)} tokens; the model's context length is "
                                   f"{self.model.context_length}", "input", "context_length_exceeded")  # fmt: skip
            inputs.append(ids)
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise RequestError(400, f"'encoding_format' must be 'float' or 'base64', got {encoding!r:.40}",
                               "encoding_format")  # fmt: skip
        dimensions = body.get("dimensions")
        if dimensions is not None and dimensions != self.model.loaded.config.dim:
            raise RequestError(400, f"'dimensions' can only be the model's {self.model.loaded.config.dim}, got "
                               f"{dimensions!r:.40}", "dimensions")  # fmt: skip
        job = Job([], {"encoding_format": encoding}, embed_inputs=inputs)
        job.result.prompt_tokens = sum(len(ids) for ids in inputs)
        return job

    def check_bytes(self, size: int, param: str) -> None:
        if size > self.max_prompt_bytes:
            raise RequestError(400, f"the prompt has {size} bytes, more than {self.max_prompt_bytes} (the most that "
                               f"{self.model.context_length} tokens of this vocabulary can hold); the model's context "
                               f"length is {self.model.context_length}", param, "context_length_exceeded")  # fmt: skip


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` > 0 of a request with `seed` (choice 0 draws with `seed` itself)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0]) & _MAX_SEED
