"""The server driven by the official `openai` client (test-only dependency) on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kiln.tensor.llm.session import ChatModel

openai = pytest.importorskip("openai")


def greedy_text(model: ChatModel, ids: list[int], max_tokens: int) -> tuple[str, int]:
    tokens = list(model.generator.generate(ids, max_tokens=max_tokens, stop_ids=model.tokenizer.stop_ids))
    kept = [t for t in tokens if t not in model.tokenizer.stop_ids]
    return model.tokenizer.decode(kept, skip_special=True), len(tokens)


def test_models_list(client, model: ChatModel) -> None:  # type: ignore[no-untyped-def]
    assert [m.id for m in client.models.list()] == [model.name]


def test_chat_non_streaming_and_streaming(client, model: ChatModel) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    expected, produced = greedy_text(model, model.encode_chat(messages), 8)
    answer = client.chat.completions.create(model=model.name, messages=messages, max_tokens=8, temperature=0)
    assert answer.choices[0].message.role == "assistant" and answer.choices[0].message.content == expected
    prompt_tokens = len(model.encode_chat(messages))
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (prompt_tokens, produced)
    assert answer.usage.total_tokens == prompt_tokens + produced
    stream = client.chat.completions.create(
        model=model.name, messages=messages, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[-1].usage.completion_tokens == produced
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == answer.choices[0].finish_reason


def test_malformed_requests_raise_the_clients_errors(client, model: ChatModel) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model=model.name, prompt="x", max_tokens=-5)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="gpt-nothing", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="context length"):
        client.completions.create(model=model.name, prompt="word " * 500, max_tokens=1)


def test_twenty_concurrent_requests_all_complete(client, model: ChatModel) -> None:  # type: ignore[no-untyped-def]
    prompts = [f"Question number {i}:" for i in range(20)]
    expected = [greedy_text(model, model.encode_prompt(p), 3)[0] for p in prompts]

    def ask(prompt: str) -> str:
        answer = client.completions.create(model=model.name, prompt=prompt, max_tokens=3, temperature=0)
        return str(answer.choices[0].text)

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(ask, prompts))
    assert answers == expected
