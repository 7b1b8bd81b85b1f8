"""Embeddings against transformers' final hidden states (fixtures/embeddings/expected.npz, recorded by
record_embeddings.py there): the hidden states, mean and last-token pooling from the model's config, and
`/v1/embeddings` through the official `openai` client."""

from __future__ import annotations

import base64
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from kiln.tensor.llm import load_model
from kiln.tensor.llm.embeddings import Embedder, Pooling, read_pooling
from kiln.tensor.llm.server import make_server
from kiln.tensor.llm.session import ChatModel, load_chat_model

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = np.load(FIXTURES / "embeddings" / "expected.npz")
INPUTS = 3


def sentence_transformers_copy(model: str, folder: Path, pooling: dict[str, bool], normalize: bool) -> Path:
    """A copy of a fixture model folder with a sentence-transformers modules.json and pooling config."""
    shutil.copytree(FIXTURES / model, folder, ignore=shutil.ignore_patterns("*.gguf", "*.npz"))
    kinds = ["Transformer", "Pooling"] + ["Normalize"] * normalize
    paths = ["", "1_Pooling", "2_Normalize"]
    modules = [{"idx": i, "name": str(i), "path": paths[i], "type": f"sentence_transformers.models.{kind}"}
               for i, kind in enumerate(kinds)]  # fmt: skip
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64, **pooling}))
    return folder


@pytest.mark.parametrize("model", ["llama", "qwen3"])
def test_hidden_states_and_last_token_default_match_transformers(model: str) -> None:
    embedder = Embedder(load_model(FIXTURES / model))
    assert embedder.pooling.mode == "last" and embedder.pooling.normalize  # a decoder without pooling config
    for index in range(INPUTS):
        ids = EXPECTED[f"{model}_ids_{index}"].tolist()
        np.testing.assert_allclose(embedder.hidden_states(ids), EXPECTED[f"{model}_hidden_{index}"], atol=2e-5)
        np.testing.assert_allclose(embedder.embed(ids), EXPECTED[f"{model}_last_{index}"], atol=2e-5)


def test_sentence_transformers_mean_pooling_from_the_config(tmp_path: Path) -> None:
    folder = sentence_transformers_copy("llama", tmp_path / "st", {"pooling_mode_mean_tokens": True}, True)
    embedder = Embedder(load_model(folder))
    assert (embedder.pooling.mode, embedder.pooling.normalize) == ("mean", True)
    for index in range(INPUTS):
        ids = EXPECTED[f"llama_ids_{index}"].tolist()
        np.testing.assert_allclose(embedder.embed(ids), EXPECTED[f"llama_mean_{index}"], atol=2e-5)
    raw = sentence_transformers_copy("llama", tmp_path / "raw", {"pooling_mode_lasttoken": True}, False)
    assert read_pooling(load_model(raw)) == Pooling("last", False, "sentence-transformers 1_Pooling")
    unsupported = sentence_transformers_copy("llama", tmp_path / "max", {"pooling_mode_max_tokens": True}, True)
    with pytest.raises(ValueError, match="pooling_mode_max_tokens"):
        read_pooling(load_model(unsupported))


def test_bad_inputs_are_refused() -> None:
    embedder = Embedder(load_model(FIXTURES / "qwen3"))
    with pytest.raises(ValueError, match="1 to"):
        embedder.embed([])
    with pytest.raises(ValueError, match="token ids"):
        embedder.embed([1, 128])


def test_embeddings_endpoint(tmp_path: Path, chat_model_dir: Path) -> None:
    openai = pytest.importorskip("openai")
    folder = sentence_transformers_copy("llama", tmp_path / "st", {"pooling_mode_mean_tokens": True}, True)
    tokenizer = load_chat_model(chat_model_dir).tokenizer  # any tokenizer: the inputs below are token ids
    model = ChatModel(load_model(folder), tokenizer, None)
    httpd, logic = make_server(model, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", api_key="x", max_retries=0)
        ids = [EXPECTED[f"llama_ids_{index}"].tolist() for index in range(INPUTS)]
        for encoding in ("float", "base64", None):  # None: the client asks for base64 and decodes it itself
            options = {} if encoding is None else {"encoding_format": encoding}
            answer = client.embeddings.create(model=model.name, input=ids, **options)
            assert [d.index for d in answer.data] == list(range(INPUTS))
            for index, item in enumerate(answer.data):
                assert item.object == "embedding"
                vector = item.embedding
                if encoding == "base64":
                    vector = np.frombuffer(base64.b64decode(vector), "<f4")
                np.testing.assert_allclose(vector, EXPECTED[f"llama_mean_{index}"], atol=2e-5)
            assert answer.usage.prompt_tokens == answer.usage.total_tokens == sum(len(i) for i in ids)
        single = client.embeddings.create(model=model.name, input=ids[0], encoding_format="float")
        np.testing.assert_allclose(single.data[0].embedding, EXPECTED["llama_mean_0"], atol=2e-5)
        for bad, param in (([], "input"), ([[1, 5000]], "input"), ([""], "input")):
            with pytest.raises(openai.BadRequestError) as info:
                client.embeddings.create(model=model.name, input=bad, encoding_format="float")
            assert info.value.body["param"] == param
        with pytest.raises(openai.BadRequestError, match="dimensions"):
            client.embeddings.create(model=model.name, input=ids[0], dimensions=8)
    finally:
        httpd.shutdown()
        httpd.server_close()
        logic.close()
