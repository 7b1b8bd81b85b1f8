"""`ChatModel`: a loaded model with its tokenizer and chat template, producing text as it is generated.

What the CLI and the server share: loading (`load_chat_model`), prompt encoding, and `stream_text`, which turns the
generator's tokens into text deltas with stop strings applied (text that might be the start of a stop string is
held back until it is known not to be one, and the stop string itself is never emitted).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kiln.tensor.llm.batching import DEFAULT_SLOTS, JOIN_CHUNK, BatchedGenerator
from kiln.tensor.llm.chat_template import ChatTemplate
from kiln.tensor.llm.generate import GenerationStats, Generator
from kiln.tensor.llm.paged_batching import PagedBatchedGenerator
from kiln.tensor.llm.tokenizer import Tokenizer, read_tokenizer_config
from kiln.tensor.llm.weights import LoadedModel, load_model

__all__ = ["ChatModel", "Completion", "TextStream", "find_chat_template", "load_chat_model", "load_tokenizer"]


@dataclass
class Completion:
    """The outcome of one generation: its text, why it ended ("stop" or "length") and the token counts."""

    text: str = ""
    finish_reason: str = "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)


def load_tokenizer(loaded: LoadedModel) -> Tokenizer:
    """The tokenizer of a loaded model: GGUF tokenizer.ggml.* keys, or tokenizer.json beside the safetensors."""
    metadata = loaded.metadata
    if "tokenizer.ggml.model" in metadata:
        tokenizer = Tokenizer.from_gguf_metadata(metadata)
    else:
        folder = Path(str(metadata.get("dir", ".")))
        tokenizer = Tokenizer.from_tokenizer_json(folder / "tokenizer.json", read_tokenizer_config(folder))
    config = loaded.config
    if tokenizer.bos_id is None and config.bos_token_id is not None:
        tokenizer.bos_id = config.bos_token_id
    for eos in _as_ids(config.eos_token_id):
        tokenizer.stop_ids.add(eos)
        if tokenizer.eos_id is None:
            tokenizer.eos_id = eos
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocabulary is {config.vocab_size}"
        )
    return tokenizer


def _as_ids(value: object) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else []


def find_chat_template(loaded: LoadedModel, path: str | os.PathLike[str] | None = None) -> tuple[str, str] | None:
    """The model's chat template text and where it came from, or None when it ships none.

    Looked up in order: `path` (a Jinja file given by the user), GGUF `tokenizer.chat_template`, the folder's
    chat_template.jinja, tokenizer_config.json `chat_template` (a string, or a list of named templates: "default").
    """
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8"), str(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"chat template file {str(path)!r} does not exist") from None
    metadata = loaded.metadata
    if "tokenizer.chat_template" in metadata:
        return str(metadata["tokenizer.chat_template"]), "GGUF tokenizer.chat_template"
    if "dir" not in metadata:
        return None
    folder = Path(str(metadata["dir"]))
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8"), "chat_template.jinja"
    template = read_tokenizer_config(folder).get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}]: transformers uses "default"
        named = {str(item.get("name")): item.get("template") for item in template if isinstance(item, dict)}
        if "default" not in named:
            raise ValueError(f"tokenizer_config.json has chat templates {sorted(named)} but none named 'default'")
        template = named["default"]
    if template is None:
        return None
    if not isinstance(template, str):
        raise ValueError(f"tokenizer_config.json chat_template must be a string, got {type(template).__name__}")
    return template, "tokenizer_config.json chat_template"


def _special_token_texts(tokenizer: Tokenizer) -> dict[str, str]:
    """The special-token variables a template sees (bos_token, eos_token), as transformers passes them."""
    texts = {}
    for name, token_id in (("bos_token", tokenizer.bos_id), ("eos_token", tokenizer.eos_id)):
        if token_id is not None and 0 <= token_id < tokenizer.vocab_size:
            texts[name] = tokenizer.token(token_id)
    return texts


class TextStream:
    """One generation's tokens turned into text deltas, with its stop ids and stop strings applied: `push` each
    token, stop pushing once `stopped`, then `finish` hands out the rest. Text that might be the beginning of a stop
    string is held back until it is known not to be one; the stop string itself is never handed out. Fills `result`
    (text, finish reason "stop" when stopped, completion_tokens) as it goes."""

    def __init__(self, tokenizer: Tokenizer, result: Completion, stop: Sequence[str] = ()) -> None:
        self.tokenizer, self.result = tokenizer, result
        self.stops = [s for s in stop if s]
        self.decoder = tokenizer.stream(skip_special=True)
        self.held = ""  # produced text not yet handed out: it might be the beginning of a stop string
        self.stopped = False

    def push(self, token: int) -> str:
        """The text that `token` makes safe to hand out ("" when none, or once stopped)."""
        if self.stopped:
            return ""
        self.result.completion_tokens += 1
        if token in self.tokenizer.stop_ids:
            self.stopped, self.result.finish_reason = True, "stop"
            return ""
        self.held += self.decoder.push(token)
        cut = min((self.held.find(s) for s in self.stops if s in self.held), default=-1)
        if cut >= 0:
            self.held, self.stopped, self.result.finish_reason = self.held[:cut], True, "stop"
            return ""
        keep = max((_overlap(self.held, s) for s in self.stops), default=0)
        if len(self.held) <= keep:
            return ""
        delta, self.held = self.held[: len(self.held) - keep], self.held[len(self.held) - keep :]
        self.result.text += delta
        return delta

    def finish(self) -> str:
        """The text held back (plus the decoder's incomplete bytes when the generation ended without a stop)."""
        if not self.stopped:
            self.held += self.decoder.flush()
        tail, self.held = self.held, ""
        self.result.text += tail
        return tail


class ChatModel:
    """A model ready to talk: `encode_prompt` / `encode_chat`, then `stream_text` or `complete`."""

    def __init__(
        self, loaded: LoadedModel, tokenizer: Tokenizer, template: ChatTemplate | None, kv_blocks: int | None = None
    ) -> None:
        self.loaded, self.tokenizer, self._template = loaded, tokenizer, template
        self.kv_blocks = kv_blocks
        """With a number: `batched` decodes over a paged KV pool of that many blocks per layer group
        (kiln.tensor.llm.paged_batching) instead of a (max_context)-row cache per slot."""
        self.generator = Generator(loaded)
        self._batched: dict[tuple[int, int, int | None], BatchedGenerator] = {}
        self.name = loaded.name
        self.context_length = loaded.model.max_context  # the KV cache's positions: prompt plus completion

    def batched(self, slots: int = DEFAULT_SLOTS, prefill_chunk: int = JOIN_CHUNK) -> BatchedGenerator:
        """The model's `BatchedGenerator` of `slots` sequence slots prefilling `prefill_chunk` tokens a step (made
        once per pair: its steps compile once, and its cache rows serve the prefix cache across servers); a
        `PagedBatchedGenerator` over `kv_blocks` blocks when the model has that number."""
        key = (slots, prefill_chunk, self.kv_blocks)
        if key not in self._batched:
            if self.kv_blocks is None:
                self._batched[key] = BatchedGenerator(self.loaded, slots, prefill_chunk)
            else:
                self._batched[key] = PagedBatchedGenerator(self.loaded, slots, prefill_chunk, kv_blocks=self.kv_blocks)
        return self._batched[key]

    @property
    def template(self) -> ChatTemplate:
        """The model's chat template; ValueError when the model has none and none was given."""
        if self._template is None:
            raise ValueError(
                f"the model {self.name!r} has no chat template (none in its GGUF metadata, chat_template.jinja or "
                "tokenizer_config.json); give one as a Jinja file (--chat-template FILE), or send a raw prompt"
            )
        return self._template

    def encode_prompt(self, text: str) -> list[int]:
        """A raw prompt's token ids (with BOS when the tokenizer adds one)."""
        return self.tokenizer.encode(text)

    def encode_chat(
        self, messages: Sequence[Mapping[str, object]], tools: Sequence[Mapping[str, object]] | None = None
    ) -> list[int]:
        """A conversation rendered with the model's chat template, the assistant's turn opened.

        The template writes BOS and the like itself, so its text is encoded without the tokenizer's own special
        tokens (as transformers' `apply_chat_template` does).
        """
        text = self.template.render(messages, add_generation_prompt=True, tools=tools)
        return self.tokenizer.encode(text, add_special=False)

    def stream_text(
        self,
        prompt_ids: list[int],
        result: Completion,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> Iterator[str]:
        """Yields text deltas as tokens arrive; fills `result` (text, finish reason, counts, timing) as it goes."""
        text = TextStream(self.tokenizer, result, stop)
        result.prompt_tokens = len(prompt_ids)
        tokens = self.generator.generate(
            prompt_ids, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
            stop_ids=self.tokenizer.stop_ids,
        )  # fmt: skip
        for token in tokens:
            delta = text.push(token)
            if delta:
                yield delta
            if text.stopped:
                break
        result.stats = self.generator.last_stats
        tail = text.finish()
        if tail:
            yield tail

    def complete(self, prompt_ids: list[int], **options: object) -> Completion:
        """The whole completion at once (`stream_text`'s deltas joined)."""
        result = Completion()
        for _ in self.stream_text(prompt_ids, result, **options):  # type: ignore[arg-type]
            pass
        return result


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that is a proper beginning of `stop`."""
    for length in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-length:]):
            return length
    return 0


def load_chat_model(
    path: str | os.PathLike[str],
    *,
    max_context: int | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    kv_blocks: int | None = None,
) -> ChatModel:
    """Loads a model (GGUF or safetensors folder), its tokenizer and its chat template.

    Args:
        path: the .gguf file or the model's folder.
        max_context: as `load_model`.
        chat_template: a Jinja file to use instead of the model's own template.
        kv_blocks: decode requests together over a paged KV pool of this many blocks (`ChatModel.kv_blocks`).
    """
    loaded = load_model(path, max_context=max_context)
    tokenizer = load_tokenizer(loaded)
    found = find_chat_template(loaded, chat_template)
    template = None if found is None else ChatTemplate(found[0], _special_token_texts(tokenizer), found[1])
    return ChatModel(loaded, tokenizer, template, kv_blocks)
