"""The OpenAI-compatible API's request logic, independent of HTTP (`kiln.tensor.llm.server` is its transport).

`LLMServer` validates a request body (`prepare`, from `RequestReader` in kiln.tensor.llm.openai_request, which also
defines `Job`, `Request` and `RequestError`) into jobs, queues them (`enqueue`: a bounded queue, 429 with a
`Retry-After` beyond `ServerLimits.max_queue`), and one worker thread runs them with continuous batching
(kiln.tensor.llm.batching): it admits queued jobs in arrival order into the free sequence slots between decode
steps; each step prefills one chunk (`ServerLimits.prefill_chunk` tokens) of the oldest admitted prompt, then
decodes one token for every job decoding already (so a long prompt arriving delays the running streams by a chunk
per token, not by its whole prefill), and each job's tokens become text through its own `TextStream` (stop strings
applied). After every step the worker asks each job whether its client has left (`Job.client_gone`, given by the
transport, or the response's reader stopped) and frees the slot of one that has, so an abandoned request stops
within one decode step. The response bodies (`response`, `chunks`), `/health` and `/metrics` (`ServerMetrics`) and
the shutdown steps (`stop_accepting`, `drain`, `abort`, `close`) live here too.

A request is a `Request` of `n` jobs (one per choice, sharing one output queue, each item tagged with its choice's
index), each with the output options of kiln.tensor.llm.request_format: log-probabilities (the worker hands out each
token's record with the text it made), a grammar (a `TokenConstraint` per job) and tool-call answers.

`/v1/embeddings` requests are jobs too (`prepare_embeddings`): the worker computes their vectors between decode steps
(kiln.tensor.llm.embeddings, the model's own pooling), so nothing runs on the model beside the worker.
"""

from __future__ import annotations

import base64
import math
import queue
import threading
import time
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from kiln.tensor.llm.batching import JOIN_CHUNK, Sequence
from kiln.tensor.llm.embeddings import Embedder
from kiln.tensor.llm.json_grammar import text_anchor, token_text
from kiln.tensor.llm.kv_pool import KVPoolExhausted
from kiln.tensor.llm.logprobs import TokenLogprob, chat_logprobs, completion_logprobs, raw_bytes
from kiln.tensor.llm.openai_request import Job, Piece, Request, RequestError, RequestReader, shutting_down_error
from kiln.tensor.llm.request_format import RequestFormat, read_tool_call, tool_call_record
from kiln.tensor.llm.server_metrics import ServerMetrics
from kiln.tensor.llm.session import ChatModel, TextStream

__all__ = ["Job", "LLMServer", "Request", "RequestError", "ServerLimits", "shutting_down_error"]

_DONE = object()  # the end of a job's output stream


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


@dataclass(eq=False)
class _Running:
    """A job in a sequence slot: its sequence of the batched generator and its text so far."""

    job: Job
    sequence: Sequence
    text: TextStream
    pushed: int = 0  # the sequence's tokens handed to `text`
    records: list[TokenLogprob] = field(default_factory=list)  # log-probabilities not handed out yet


class LLMServer(RequestReader):
    """The request logic, independent of HTTP: validation (`RequestReader`, kiln.tensor.llm.openai_request), the
    bounded job queue and the worker, response bodies, health and metrics, shutdown."""

    def __init__(self, model: ChatModel, limits: ServerLimits | None = None) -> None:
        super().__init__(model)
        self.limits = limits or ServerLimits()
        self.metrics = ServerMetrics()
        self.jobs: queue.Queue[Job | None] = queue.Queue()  # bounded by `enqueue`, so the stop marker always fits
        self.batch = model.batched(self.limits.max_batch, self.limits.prefill_chunk)
        self._running: dict[Sequence, _Running] = {}  # the worker's jobs in sequence slots
        self.accepting, self.aborting = True, False
        self.pending = 0  # jobs queued or running (under _lock)
        self.served = 0
        self.seconds_per_job = 1.0  # a moving average of a job's run time, for Retry-After
        self._lock = threading.Lock()
        self._anchor = text_anchor(model.tokenizer)
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
        except KVPoolExhausted as error:  # longer than the whole paged pool can ever hold: the request's fault
            job.put(RequestError(400, str(error)))
            self._finish(job, "failed")
            return
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

    def spell(self, token: int) -> bytes:
        """A token's bytes in log-probability records (its text as it reads after other text, or the bytes its
        vocabulary entry stands for when that text is part of a character)."""
        if token not in self._spelled:
            text = token_text(self.model.tokenizer.decode, token, self._anchor)
            data = raw_bytes(self.model.tokenizer.token(token)) if "\ufffd" in text else None
            self._spelled[token] = text.encode() if data is None else data
        return self._spelled[token]

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
