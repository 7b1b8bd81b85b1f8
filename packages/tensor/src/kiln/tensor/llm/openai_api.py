"""The OpenAI-compatible API's request logic, independent of HTTP (`kiln.tensor.llm.server` is its transport).

`LLMServer` validates a request body (`prepare`) into a job, queues it (`enqueue`: a bounded queue, 429 with a
`Retry-After` beyond `ServerLimits.max_queue`), and one worker thread runs them with continuous batching
(kiln.tensor.llm.batching): it admits queued jobs in arrival order into the free sequence slots between decode
steps; each step prefills one chunk (`ServerLimits.prefill_chunk` tokens) of the oldest admitted prompt, then
decodes one token for every job decoding already (so a long prompt arriving delays the running streams by a chunk
per token, not by its whole prefill), and each job's tokens become text through its own `TextStream` (stop strings
applied). After every step the worker asks each job whether its client has left (`Job.client_gone`, given by the
transport, or the response's reader stopped) and frees the slot of one that has, so an abandoned request stops
within one decode step. The response bodies (`response`, `chunks`), `/health` and `/metrics` (`ServerMetrics`) and
the shutdown steps (`stop_accepting`, `drain`, `abort`, `close`) live here too. A refused request raises
`RequestError`, whose `body()` is OpenAI's error shape.

A request becomes a `Request` of `n` jobs (one per choice, sharing one output queue, each item tagged with its
choice's index), each with the output options of kiln.tensor.llm.request_format: log-probabilities (the worker hands
out each token's record with the text it made), a grammar (a `TokenConstraint` per job: JSON mode, a JSON schema, a
forced tool call) and tool-call answers. With a seed, choice 0 draws with that seed and choice i with one derived
from (seed, i), so every choice is reproducible.

`/v1/embeddings` requests are jobs too (`prepare_embeddings`): the worker computes their vectors between decode steps
(kiln.tensor.llm.embeddings, the model's own pooling), so nothing runs on the model beside the worker.

A prompt is measured in bytes before it is tokenized: a text longer than the context times the most bytes one token
of the vocabulary can stand for cannot fit, and is refused without spending the CPU time of tokenizing it.
"""

from __future__ import annotations

import base64
import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from kiln.tensor.llm.batching import JOIN_CHUNK, Sequence
from kiln.tensor.llm.chat_template import validate_messages
from kiln.tensor.llm.embeddings import Embedder
from kiln.tensor.llm.json_grammar import TokenConstraint, Vocabulary, text_anchor, token_text
from kiln.tensor.llm.logprobs import TokenLogprob, chat_logprobs, completion_logprobs, raw_bytes
from kiln.tensor.llm.request_format import FormatError, RequestFormat, parse_format, read_tool_call, tool_call_record
from kiln.tensor.llm.server_metrics import ServerMetrics
from kiln.tensor.llm.session import ChatModel, Completion, TextStream

__all__ = ["Job", "LLMServer", "Request", "RequestError", "ServerLimits", "shutting_down_error"]

_DONE = object()  # the end of a job's output stream
_MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class ServerLimits:
    """How much the server accepts from its clients, and how long it waits for them (seconds)."""

    max_body_bytes: int = 4 * 2**20
    """A larger request body is refused (413) unread."""
    max_queue: int = 64
    """Generations waiting for a free sequence slot; one more is refused (429 with Retry-After)."""
    max_batch: int = 8
    """Generations decoded together (the sequence slots of the batched decode step, each with its KV cache rows)."""
    prefill_chunk: int = JOIN_CHUNK
    """Prompt tokens a joining generation prefills between two decode steps of the running ones."""
    max_connections: int = 128
    """Connections served at once; further ones wait in the listen backlog."""
    backlog: int = 128
    """The listen queue of connections not yet accepted."""
    read_timeout: float = 15.0
    """The deadline for a request's line and headers (also how long an idle keep-alive connection stays open), and
    another for its body."""
    write_timeout: float = 30.0
    """How long one write may wait for a client that does not read."""
    shutdown_grace: float = 30.0
    """At shutdown, how long queued and running generations may go on before they are failed."""
    api_key: str | None = None
    """When set, every route but /health needs `Authorization: Bearer <api_key>`."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names served beyond the loopback names and the bound address ("*": any)."""

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_queue", "max_batch", "prefill_chunk", "max_connections", "backlog"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServerLimits.{name} must be a positive integer, got {value!r}")
        for name in ("read_timeout", "write_timeout", "shutdown_grace"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"ServerLimits.{name} must be a positive number of seconds, got {value!r}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("ServerLimits.api_key must be a non-empty string or None")


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


@dataclass(eq=False)
class _Running:
    """A job in a sequence slot: its sequence of the batched generator and its text so far."""

    job: Job
    sequence: Sequence
    text: TextStream
    pushed: int = 0  # the sequence's tokens handed to `text`
    records: list[TokenLogprob] = field(default_factory=list)  # log-probabilities not handed out yet


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(400, f"'{name}' must be a number in [{low}, {high}], got {value!r}", name)
    return float(value)


class LLMServer:
    """The request logic, independent of HTTP: validation, the bounded job queue and the worker, response bodies,
    health and metrics, shutdown."""

    def __init__(self, model: ChatModel, limits: ServerLimits | None = None) -> None:
        self.model, self.limits = model, limits or ServerLimits()
        self.metrics = ServerMetrics()
        self.jobs: queue.Queue[Job | None] = queue.Queue()  # bounded by `enqueue`, so the stop marker always fits
        self.batch = model.batched(self.limits.max_batch, self.limits.prefill_chunk)
        self._running: dict[Sequence, _Running] = {}  # the worker's jobs in sequence slots
        self.accepting, self.aborting = True, False
        self.pending = 0  # jobs queued or running (under _lock)
        self.served = 0
        self.seconds_per_job = 1.0  # a moving average of a job's run time, for Retry-After
        self._lock = threading.Lock()
        # Each token stands for at most its longest text's bytes, plus one (SentencePiece drops a word's leading
        # space when decoding one token), times 4 for normalizers that fold characters: a prompt with more bytes
        # than the context times that cannot fit, and is refused before it is tokenized.
        tokenizer = model.tokenizer
        longest = max((len(tokenizer.decode([i]).encode()) for i in range(tokenizer.vocab_size)), default=1)
        self.max_prompt_bytes = model.context_length * 4 * (longest + 1)
        self._vocabulary: Vocabulary | None = None  # made for the first constrained request
        self._vocabulary_lock = threading.Lock()  # not `_lock`: the enqueues must not wait for the vocabulary
        self._anchor = text_anchor(tokenizer)
        self._spelled: dict[int, bytes] = {}
        self._embedder: Embedder | None = None  # made by the worker for the first embeddings request
        self.worker = threading.Thread(target=self._work, name="kiln-llm-worker", daemon=True)
        self.worker.start()

    @property
    def running(self) -> int:
        """How many generations are decoding now (at most `limits.max_batch`)."""
        return len(self._running)

    # -- the worker: continuous batching ----------------------------------------------------------------------------
    def _work(self) -> None:
        stopping = False  # the stop marker was taken: finish the running jobs, admit no more
        while not stopping or self._running:
            while not stopping and self.batch.free_slots():
                try:
                    job = self.jobs.get(block=not self._running)  # idle: wait for work; busy: take what waits
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                else:
                    self._admit(job)
            if self._running:
                self._step()

    def _admit(self, job: Job) -> None:
        """Starts `job` in a free slot (the next steps prefill it, a chunk each), or ends it at once (shutting down,
        its client gone, a failure)."""
        job.started_at = time.monotonic()
        if self.aborting:
            job.put(shutting_down_error())
            self._close(job)
            return
        if job.left():
            self._finish(job, "cancelled")
            return
        if job.embed_inputs is not None:
            self._embed(job, job.embed_inputs)
            return
        options = dict(job.options)
        text = TextStream(self.model.tokenizer, job.result, options.pop("stop", ()))
        job.result.prompt_tokens = len(job.prompt_ids)
        try:
            sequence = self.batch.start(job.prompt_ids, stop_ids=self.model.tokenizer.stop_ids, chunked=True, **options)
        except Exception as error:  # reported to the waiting request; the worker goes on with the others
            job.put(RequestError(500, f"generation failed: {type(error).__name__}: {error}"))
            self._finish(job, "failed")
            return
        job.result.stats = sequence.stats
        run = self._running[sequence] = _Running(job, sequence, text)
        self._advance(run, sequence.tokens)

    def _step(self) -> None:
        """One step: a prefill chunk of the oldest joining job, then a decode step of every job decoding before. A
        failed chunk fails its job alone (its slot was freed, the step went no further); a failed decode fails them
        all (the step's cache rows are unknown)."""
        joining = self.batch.joining[0][0] if self.batch.joining else None
        try:
            produced = self.batch.step()
        except Exception as error:
            failed = list(self._running.values())
            if joining is not None and not joining.finished and self.batch.running[joining.slot] is not joining:
                failed = [self._running[joining]]
            for run in failed:
                self.batch.cancel(run.sequence)
                run.job.put(RequestError(500, f"generation failed: {type(error).__name__}: {error}"))
                del self._running[run.sequence]
                self._finish(run.job, "failed")
            return
        for sequence, token in produced:
            self._advance(self._running[sequence], [token])

    def _advance(self, run: _Running, tokens: list[int]) -> None:
        """Hands a job's new tokens to its client as text; ends the job when its sequence or text stopped, the server
        is aborting (503) or the client has left (its slot is freed for the next job)."""
        job, sequence, text = run.job, run.sequence, run.text
        for token in tokens:
            if text.stopped:
                break
            if sequence.logprobs is not None and token not in sequence.stop_ids:
                run.records.append(sequence.logprob_entries[run.pushed])
            run.pushed += 1
            delta = text.push(token)
            if delta:
                self._hand_out(run, delta)
        if text.stopped or sequence.finished:
            outcome = "finished"
            tail = text.finish()
            if sequence.constraint is not None and sequence.constraint.complete:
                job.result.finish_reason = "stop"
            if tail or run.records:
                self._hand_out(run, tail)
        elif self.aborting:
            outcome = "failed"
            job.put(RequestError(503, "the server shut down before the generation finished",
                                 code="server_shutting_down"))  # fmt: skip
        elif job.left():
            outcome = "cancelled"
        else:
            return
        self.batch.cancel(sequence)  # no-op for a sequence that ended by itself
        del self._running[sequence]
        self._finish(job, outcome)

    def _embed(self, job: Job, inputs: list[list[int]]) -> None:
        try:
            if self._embedder is None:
                self._embedder = Embedder(self.model.loaded)
            job.put([self._embedder.embed(ids) for ids in inputs])
        except Exception as error:
            job.put(RequestError(500, f"embedding failed: {type(error).__name__}: {error}"))
        self._close(job)

    def _hand_out(self, run: _Running, delta: str) -> None:
        run.job.first_text_at = run.job.first_text_at or time.monotonic()
        run.job.put((delta, run.records))
        run.records = []

    def _finish(self, job: Job, outcome: str) -> None:
        """Counts an ended job in the metrics and closes its output."""
        now = time.monotonic()
        first_text = None if job.first_text_at is None else job.first_text_at - job.queued_at
        result = job.result
        self.metrics.count_generation(outcome, result.prompt_tokens, result.completion_tokens, now - job.queued_at,
                                      first_text)  # fmt: skip
        self.seconds_per_job = 0.8 * self.seconds_per_job + 0.2 * (now - job.started_at)
        self.served += 1
        self._close(job)

    def _close(self, job: Job) -> None:
        with self._lock:
            self.pending -= 1
        job.put(_DONE)

    def enqueue(self, request: Request) -> None:
        """Queues the request's jobs for the worker; RequestError 429 (with Retry-After) when they would make more
        than `max_queue` jobs wait (a request of more choices than that is taken when none waits), 503 while shutting
        down."""
        with self._lock:
            if not self.accepting:
                raise shutting_down_error()
            waiting = self.jobs.qsize()
            if waiting and waiting + len(request.jobs) > self.limits.max_queue:
                retry = max(1, math.ceil(self.seconds_per_job * (waiting + 1) / self.limits.max_batch))
                raise RequestError(429, f"{waiting} requests are waiting already (the limit); retry in {retry} s",
                                   code="queue_full", headers={"Retry-After": str(retry)})  # fmt: skip
            for job in request.jobs:
                job.queued_at = time.monotonic()
                self.pending += 1
                self.jobs.put(job)

    def results(self, request: Request) -> Generator[tuple[int, Piece | None], None, None]:
        """(choice index, piece) as the worker produces them, and (index, None) when a choice has ended (raises what
        the worker raised). Closing this iterator early (the client left) tells the worker to stop the jobs."""
        out, left = request.jobs[0].out, len(request.jobs)
        try:
            while left:
                index, item = out.get()
                if isinstance(item, Exception):
                    raise item
                if item is _DONE:
                    left -= 1
                    yield index, None
                else:
                    yield index, item
        finally:
            for job in request.jobs:
                job.abandoned = True

    # -- shutdown ------------------------------------------------------------------------------------------------
    def stop_accepting(self) -> None:
        """New generation requests are refused (503) from now on."""
        with self._lock:
            self.accepting = False

    def drain(self, deadline: float) -> bool:
        """Waits until no job is queued or running, or until `deadline` (time.monotonic()); whether they all ended."""
        while self.pending:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def abort(self) -> None:
        """Fails the queued jobs (503) and stops the running ones after their next decode step."""
        self.aborting = True

    def close(self, timeout: float = 60.0) -> None:
        """Stops the worker after the jobs queued so far have run."""
        self.stop_accepting()
        self.jobs.put(None)
        self.worker.join(timeout=timeout)

    # -- bodies --------------------------------------------------------------------------------------------------
    def models(self) -> dict[str, Any]:
        created = int(time.time())
        return {"object": "list", "data": [{"id": self.model.name, "object": "model", "created": created,
                                            "owned_by": "kiln"}]}  # fmt: skip

    def health(self) -> tuple[int, dict[str, Any]]:
        """(200, ...) while the server takes requests, else (503, ...)."""
        ok = self.accepting and self.worker.is_alive()
        body = {"status": "ok" if ok else "unavailable", "model": self.model.name, "queued": self.jobs.qsize(),
                "running": self.running}  # fmt: skip
        return (200 if ok else 503), body

    def metrics_text(self, open_connections: int) -> str:
        gauges = {
            "queue_depth": ("Generations waiting for the worker.", float(self.jobs.qsize())),
            "queue_limit": ("Generations that may wait before requests are refused (429).", self.limits.max_queue),
            "running": ("Generations decoding now (at most the batch size).", float(self.running)),
            "batch_slots": ("Generations that may decode together (--max-batch).", float(self.limits.max_batch)),
            "open_connections": ("HTTP connections open.", float(open_connections)),
        }
        return self.metrics.render(gauges)

    def _addressed_to_me(self, body: Any) -> dict[str, Any]:
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
        body = self._addressed_to_me(body)
        param = "messages" if chat else "prompt"
        try:
            output = parse_format(body, chat)
        except FormatError as error:
            raise RequestError(400, str(error), error.param) from None
        try:
            if chat:
                messages = validate_messages(body.get("messages"))
                self._check_bytes(sum(len(str(m.get("content") or "").encode()) for m in messages), param)
                tools = [dict(tool) for tool in output.tools.values()] or None
                prompt_ids = self.model.encode_chat(messages, tools=tools)
            else:
                prompt = body.get("prompt")
                if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                    prompt = prompt[0]
                if not isinstance(prompt, str) or not prompt:
                    raise RequestError(400, f"'prompt' must be a non-empty string, got {prompt!r:.80}", "prompt")
                self._check_bytes(len(prompt.encode()), param)
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

    def spell(self, token: int) -> bytes:
        """A token's bytes in log-probability records (its text as it reads after other text, or the bytes its
        vocabulary entry stands for when that text is part of a character)."""
        if token not in self._spelled:
            text = token_text(self.model.tokenizer.decode, token, self._anchor)
            data = raw_bytes(self.model.tokenizer.token(token)) if "\ufffd" in text else None
            self._spelled[token] = text.encode() if data is None else data
        return self._spelled[token]

    def prepare_embeddings(self, body: Any) -> Job:
        """Validates an embeddings request body (input: a string, strings, token ids, or lists of token ids) into
        the job to queue (its `options` hold `encoding_format`)."""
        body = self._addressed_to_me(body)
        given = body.get("input")
        if isinstance(given, str) or (isinstance(given, list) and given and all(_is_id(i) for i in given)):
            given = [given]
        if not isinstance(given, list) or not given or len(given) > 2048:
            raise RequestError(400, f"'input' must be a string, a list of 1 to 2048 strings, token ids or lists of "
                               f"token ids, got {given!r:.80}", "input")  # fmt: skip
        vocab, inputs = self.model.loaded.config.vocab_size, []
        for position, item in enumerate(given):
            if isinstance(item, str) and item:
                self._check_bytes(len(item.encode()), "input")
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

    def embeddings(self, job: Job) -> dict[str, Any]:
        """The embeddings response body: {object: "list", data: [{object: "embedding", index, embedding}], ...}."""
        request = Request([job], False, False, RequestFormat())
        with closing(self.results(request)) as items:
            vectors = cast(list[np.ndarray], next(item for _, item in items if item is not None))
        data = []
        for index, vector in enumerate(vectors):
            values: Any = vector.astype(np.float32).tolist()
            if job.options["encoding_format"] == "base64":
                values = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": index, "embedding": values})
        tokens = job.result.prompt_tokens
        return {"object": "list", "data": data, "model": self.model.name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}  # fmt: skip

    def _check_bytes(self, size: int, param: str) -> None:
        if size > self.max_prompt_bytes:
            raise RequestError(400, f"the prompt has {size} bytes, more than {self.max_prompt_bytes} (the most that "
                               f"{self.model.context_length} tokens of this vocabulary can hold); the model's context "
                               f"length is {self.model.context_length}", param, "context_length_exceeded")  # fmt: skip

    def usage(self, request: Request) -> dict[str, Any]:
        """OpenAI's usage record (the prompt counted once, the completion tokens of every choice);
        `prompt_tokens_details.cached_tokens` counts the prompt tokens whose cache rows an earlier request left (the
        prefix cache) and that were not computed again."""
        results = [job.result for job in request.jobs]
        prompt, completion = results[0].prompt_tokens, sum(result.completion_tokens for result in results)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": results[0].stats.cached_tokens}}  # fmt: skip

    def _tool_call(self, request: Request, text: str) -> dict[str, Any] | None:
        """The tool call a chat choice's text makes, in OpenAI's shape, or None."""
        if request.format.tool_mode == "none":
            return None
        call = read_tool_call(text, request.format.tools)
        return None if call is None else tool_call_record(*call)

    def response(self, request: Request, ident: str, created: int) -> dict[str, Any]:
        """The non-streaming response body (after the whole generation)."""
        texts: list[list[str]] = [[] for _ in request.jobs]
        records: list[list[TokenLogprob]] = [[] for _ in request.jobs]
        with closing(self.results(request)) as pieces:
            for index, piece in pieces:
                if piece is not None:
                    texts[index].append(piece[0])
                    records[index].extend(piece[1])
        choices = []
        for job, parts, entries in zip(request.jobs, texts, records, strict=True):
            text, finish = "".join(parts), job.result.finish_reason
            logprobs = None
            if request.chat:
                message: dict[str, Any] = {"role": "assistant", "content": text}
                call = self._tool_call(request, text)
                if call is not None:
                    message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
                if request.format.logprobs is not None:
                    logprobs = chat_logprobs(entries, self.spell)
                choices.append({"index": job.index, "message": message, "finish_reason": finish, "logprobs": logprobs})
            else:
                if request.format.logprobs is not None:
                    logprobs = completion_logprobs(entries, self.spell, b"")
                choices.append({"index": job.index, "text": text, "finish_reason": finish, "logprobs": logprobs})
        return {"id": ident, "object": "chat.completion" if request.chat else "text_completion", "created": created,
                "model": self.model.name, "choices": choices, "usage": self.usage(request)}  # fmt: skip

    def chunks(self, request: Request, ident: str, created: int, usage: bool) -> Generator[dict[str, Any], None, None]:
        """The streaming response's chunks: each choice's text deltas (with their log-probabilities), then one with
        its finish reason, and the usage last when asked for. A forced tool call comes whole, as one delta with
        `tool_calls`, when its choice ends."""
        chat, kind = request.chat, "chat.completion.chunk" if request.chat else "text_completion"
        calls = request.format.tool_mode == "call"
        held = [""] * len(request.jobs)  # a forced tool call's text so far
        spelled = [b""] * len(request.jobs)  # the bytes of each choice's tokens so far (for text offsets)

        def chunk(index: int, delta: dict[str, Any] | str, finish: str | None, logprobs: Any = None) -> dict[str, Any]:
            if chat:
                choice: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
            else:
                choice = {"index": index, "text": delta, "finish_reason": finish, "logprobs": logprobs}
            return {"id": ident, "object": kind, "created": created, "model": self.model.name, "choices": [choice]}

        if chat:
            for job in request.jobs:
                yield chunk(job.index, {"role": "assistant", "content": ""}, None)
        with closing(self.results(request)) as pieces:
            for index, piece in pieces:
                job = request.jobs[index]
                if piece is None:
                    finish = job.result.finish_reason
                    call = self._tool_call(request, held[index]) if calls else None
                    if call is not None:
                        yield chunk(index, {"tool_calls": [{"index": 0, **call}]}, None)
                        finish = "tool_calls"
                    yield chunk(index, {} if chat else "", finish)
                    continue
                text, entries = piece
                if calls:
                    held[index] += text
                    continue
                logprobs = None
                if request.format.logprobs is not None:
                    if chat:
                        logprobs = chat_logprobs(entries, self.spell)
                    else:
                        logprobs = completion_logprobs(entries, self.spell, spelled[index])
                        spelled[index] += b"".join(self.spell(entry.token) for entry in entries)
                yield chunk(index, {"content": text} if chat else text, None, logprobs)
        if usage:
            yield {"id": ident, "object": kind, "created": created, "model": self.model.name, "choices": [],
                   "usage": self.usage(request)}  # fmt: skip


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` > 0 of a request with `seed` (choice 0 draws with `seed` itself)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0]) & _MAX_SEED
