"""kiln.tensor.llm: llama-family language models from GGUF or safetensors (model, weights, generation)."""

from kiln.tensor.llm.config import LlamaConfig
from kiln.tensor.llm.generate import GenerationStats, Generator
from kiln.tensor.llm.model import Transformer
from kiln.tensor.llm.weights import LoadedModel, load_model

__all__ = ["GenerationStats", "Generator", "LlamaConfig", "LoadedModel", "Transformer", "load_model"]
