"""kiln.tensor.llm: llama-family language models from GGUF or safetensors: model, weights, generation (one sequence,
or continuous batching of several), tokenizer, chat format, `python -m kiln.tensor.llm` (chat CLI) and `... serve`
(OpenAI-compatible server).

Needs the `llm` extra (`pip install 'kiln-tensor[llm]'`: tokenizers and jinja2)."""

import kiln.tensor.llm.requirements  # noqa: F401  (first: a missing package of the extra is named, not hit deep inside)

# isort: split
from kiln.tensor.llm.batching import BatchedGenerator
from kiln.tensor.llm.chat_template import ChatTemplate
from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.generate import GenerationStats, Generator
from kiln.tensor.llm.kv_pool import KVPoolExhausted
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.paged_batching import PagedBatchedGenerator
from kiln.tensor.llm.session import ChatModel, Completion, load_chat_model
from kiln.tensor.llm.tokenizer import Tokenizer
from kiln.tensor.llm.weights import LoadedModel, load_model

__all__ = [
    "BatchedGenerator",
    "ChatModel",
    "ChatTemplate",
    "Completion",
    "GenerationStats",
    "Generator",
    "KVPoolExhausted",
    "LlamaConfig",
    "LoadedModel",
    "PagedBatchedGenerator",
    "Tokenizer",
    "Transformer",
    "load_chat_model",
    "load_model",
]
