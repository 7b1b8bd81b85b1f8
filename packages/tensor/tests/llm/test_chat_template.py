"""kiln's chat formats against the models' own Jinja templates rendered by jinja2 (the test-only reference)."""

from __future__ import annotations

import pytest

from kiln.tensor.llm.chat_template import ChatTemplate, validate_messages

from .conftest import LLAMA3_TEMPLATE

jinja2 = pytest.importorskip("jinja2")

# Qwen2's chat template (ChatML with a default system message), as published in its tokenizer_config.json
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou "
    "are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant"
    "\\n' }}{% endif %}"
)
CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is 2+2?\n"}],
    [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another, in 日本語 🙂"},
    ],
]


def reference(template: str, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
    environment = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
    return environment.from_string(template).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token="<|begin_of_text|>"
    )


@pytest.mark.parametrize("template", [LLAMA3_TEMPLATE, QWEN2_TEMPLATE], ids=["llama3", "qwen2"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_render_equals_jinja(template: str, add_generation_prompt: bool, messages: list[dict[str, str]]) -> None:
    ours = ChatTemplate.from_template(template, bos_token="<|begin_of_text|>")
    assert ours.family in ("llama3", "chatml")
    assert ours.render(messages, add_generation_prompt) == reference(template, messages, add_generation_prompt)


def test_chatml_without_a_default_system_message() -> None:
    template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
        " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    ours = ChatTemplate.from_template(template)
    assert ours.default_system is None
    for messages in CONVERSATIONS:
        assert ours.render(messages) == reference(template, messages, True)


def test_fallback_format_is_documented_plain_text() -> None:
    for template in (None, "", "{{ messages[0]['content'] }} [INST]"):
        plain = ChatTemplate.from_template(template, bos_token="<s>")
        assert plain.family == "plain" and not plain.writes_bos
        assert plain.render(CONVERSATIONS[1]) == "system: Be brief.\nuser:   What is 2+2?\n\nassistant:"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"role": "wizard", "content": "x"}], "role must be one of"),
        ([{"role": "user", "content": 3}], "content must be a string"),
        (["hi"], "must be an object"),
    ],
)
def test_bad_messages(messages: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_messages(messages)


def test_text_content_parts_are_joined() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert validate_messages(parts) == [{"role": "user", "content": "ab"}]
