"""A tiny chat model built here for the app tests: a byte-level BPE tokenizer trained with the `tokenizers` library
(the test-only reference) and random llama weights in safetensors, with a Llama 3 chat template."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from kiln.tensor.llm.server import make_server
from kiln.tensor.llm.session import ChatModel, load_chat_model

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# The Llama 3 instruct chat template as published with the model (tokenizer_config.json "chat_template")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
CORPUS = [
    "Hello world! It's 2026, isn't it? Héllo wörld, naïve café 12345 numbers.\n\n  Indented\tTabs",
    "The quick brown fox jumps over the lazy dog. 日本語のテキスト. Ünïcödé ✓ emoji 🙂 ok",
    "def main():\n    return [x * 2 for x in range(10)]  # code too\r\n",
]


def train_tokenizer(split: str, vocab_size: int = 400):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer with `split` as its pre-tokenizer regex, trained by the tokenizers library."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [
            tokenizers.pre_tokenizers.Split(tokenizers.Regex(split), behavior="isolated"),
            tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with config.json, model.safetensors, tokenizer.json and tokenizer_config.json."""
    numpy_io = pytest.importorskip("safetensors.numpy")
    folder = tmp_path_factory.mktemp("chat_model")
    tok = train_tokenizer(LLAMA3_SPLIT)
    tok.save(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE})
    )
    hidden, heads, kv_heads, head_dim, inter, layers = 32, 2, 1, 16, 48, 1
    config = {
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "max_position_embeddings": 96, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 4, "hidden_act": "silu",
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(7)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    weights = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": 1 + w(hidden) * 0.1,
               "lm_head.weight": w(vocab, hidden)}  # fmt: skip
    for i in range(layers):
        prefix = f"model.layers.{i}."
        weights |= {
            prefix + "input_layernorm.weight": 1 + w(hidden) * 0.1,
            prefix + "post_attention_layernorm.weight": 1 + w(hidden) * 0.1,
            prefix + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
            prefix + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
            prefix + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
            prefix + "self_attn.o_proj.weight": w(hidden, heads * head_dim),
            prefix + "mlp.gate_proj.weight": w(inter, hidden),
            prefix + "mlp.up_proj.weight": w(inter, hidden),
            prefix + "mlp.down_proj.weight": w(hidden, inter),
        }
    numpy_io.save_file(weights, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def model(chat_model_dir: Path) -> ChatModel:
    """The tiny chat model loaded once per test module."""
    return load_chat_model(chat_model_dir)


@pytest.fixture(scope="module")
def client(model: ChatModel) -> Iterator[object]:
    """The official `openai` client talking to `model` served on an ephemeral port for the module."""
    openai = pytest.importorskip("openai")
    httpd, logic = make_server(model, port=0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="unused", max_retries=0)
    httpd.shutdown()
    httpd.server_close()
    logic.close()
