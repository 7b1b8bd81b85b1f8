"""Chat templates run as Jinja: published templates against transformers' `apply_chat_template` output (recorded in
fixtures/chat_templates.json by fixtures/record_chat_templates.py), refusals, the sandbox, and template lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln.tensor.llm.chat_template import ChatTemplate, validate_messages
from kiln.tensor.llm.session import find_chat_template, load_chat_model
from kiln.tensor.llm.weights import LoadedModel

from .fixtures.published_templates import CONVERSATIONS, TEMPLATES, TOOLS

RECORDS = json.loads((Path(__file__).parent / "fixtures" / "chat_templates.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "record", RECORDS["records"], ids=lambda r: f"{r['template']}-{r['conversation']}-{r['add_generation_prompt']}"
)
def test_published_templates_render_as_transformers(record: dict[str, object]) -> None:
    source, special = TEMPLATES[str(record["template"])]
    template = ChatTemplate(source, special, origin=str(record["template"]))
    messages = CONVERSATIONS[str(record["conversation"])]
    tools = TOOLS if record["template"] == "tools" else None
    if "error" in record:  # the template refuses the conversation (raise_exception, or an undefined value)
        with pytest.raises(ValueError, match="refused the conversation") as caught:
            template.render(messages, bool(record["add_generation_prompt"]), tools=tools)
        assert str(record["error"]) in str(caught.value)
    else:
        assert template.render(messages, bool(record["add_generation_prompt"]), tools=tools) == record["text"]


def test_every_published_template_has_a_three_turn_rendering() -> None:
    rendered = {r["template"] for r in RECORDS["records"] if r["conversation"] == "three_turns" and "text" in r}
    assert rendered == set(TEMPLATES) and {"llama3", "chatml_qwen2", "mistral", "gemma", "phi3"} <= rendered


def test_a_raising_template_names_its_message() -> None:
    template = ChatTemplate(*TEMPLATES["mistral"])
    with pytest.raises(ValueError, match="Conversation roles must alternate"):
        template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    custom = ChatTemplate("{% if tools is none %}{{ raise_exception('need tools, got ' ~ messages|length) }}{%endif%}")
    with pytest.raises(ValueError, match="need tools, got 1"):
        custom.render([{"role": "user", "content": "a"}])


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.append({'role': 'user', 'content': 'injected'}) }}",  # mutating what was passed in
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",  # reaching the interpreter's internals
        "{% set ns = namespace() %}{% set ns._private = 1 %}{{ ns._private }}",  # underscore names on a namespace
        "{{ raise_exception.__globals__['os'] }}",  # a function's module globals
    ],
)
def test_the_sandbox_refuses(source: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="sandbox forbids"):
        ChatTemplate(source).render(messages)
    assert messages == [{"role": "user", "content": "hi"}]


def test_helpers_and_variables() -> None:
    source = (
        "{{ strftime_now('%Y') | length }}|{{ {'a': '<&>'} | tojson }}|{{ dict(x=1) | tojson }}|"
        "{{ enable_thinking }}|{{ bos_token }}|{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}"
        "{{ m.content }}{% break %}{% endfor %}"
    )
    text = ChatTemplate(source, {"bos_token": "<s>"}).render(
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
        enable_thinking=False,
    )
    assert text == '4|{"a": "<&>"}|{"x": 1}|False|<s>|b'  # tojson does not HTML-escape, unlike jinja2's own


def test_bad_templates_and_tools() -> None:
    with pytest.raises(ValueError, match="not valid Jinja"):
        ChatTemplate("{% for m in messages %}")
    with pytest.raises(ValueError, match="non-empty Jinja text"):
        ChatTemplate("  ")
    with pytest.raises(ValueError, match="tools must be a list"):
        ChatTemplate("x").render([{"role": "user", "content": "a"}], tools={"name": "f"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([{"role": "wizard", "content": "x"}], "role must be one of"),
        ([{"role": "user", "content": 3}], "content must be a string"),
        ([{"role": "user", "content": None}], "content must be a string"),
        (["hi"], "must be an object"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "text parts"),
    ],
)
def test_bad_messages(messages: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_messages(messages)


def test_messages_keep_their_keys_but_not_none() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": None}]
    assert validate_messages(parts) == [{"role": "user", "content": "ab"}]
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}
    assert validate_messages([call]) == [{"role": "assistant", "tool_calls": [{"id": "1"}]}]


def _loaded(metadata: dict[str, object]) -> LoadedModel:
    return LoadedModel(None, None, metadata, "m")  # type: ignore[arg-type]


def test_template_lookup_order(tmp_path: Path) -> None:
    assert find_chat_template(_loaded({"tokenizer.chat_template": "G"})) == ("G", "GGUF tokenizer.chat_template")
    assert find_chat_template(_loaded({"dir": str(tmp_path)})) is None
    config = {"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert find_chat_template(_loaded({"dir": str(tmp_path)})) == ("D", "tokenizer_config.json chat_template")
    (tmp_path / "chat_template.jinja").write_text("J")
    assert find_chat_template(_loaded({"dir": str(tmp_path)})) == ("J", "chat_template.jinja")
    (tmp_path / "mine.jinja").write_text("M")
    assert find_chat_template(_loaded({"dir": str(tmp_path)}), tmp_path / "mine.jinja")[0] == "M"  # type: ignore[index]
    with pytest.raises(FileNotFoundError, match=r"nope\.jinja"):
        find_chat_template(_loaded({}), tmp_path / "nope.jinja")
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "x", "template": "X"}]}))
    with pytest.raises(ValueError, match="none named 'default'"):
        find_chat_template(_loaded({"dir": str(tmp_path)}))


def test_model_without_a_template_says_so(chat_model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "no_template"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_bytes((chat_model_dir / name).read_bytes())
    model = load_chat_model(folder)
    assert model.encode_prompt("hi")  # raw prompts still work
    with pytest.raises(ValueError, match=r"no chat template.*--chat-template FILE"):
        model.encode_chat([{"role": "user", "content": "hi"}])
    (tmp_path / "t.jinja").write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    given = load_chat_model(folder, chat_template=tmp_path / "t.jinja")
    ids = given.encode_chat([{"role": "user", "content": "hi"}])
    assert given.tokenizer.decode(ids) == "[hi]"  # no BOS from the tokenizer: the template writes its own


def test_chat_model_encodes_the_rendered_template(chat_model_dir: Path) -> None:
    model = load_chat_model(chat_model_dir)
    messages = CONVERSATIONS["three_turns"]
    record = next(
        r
        for r in RECORDS["records"]
        if r["template"] == "llama3" and r["conversation"] == "three_turns" and r["add_generation_prompt"]
    )
    ids = model.encode_chat(messages)
    assert model.tokenizer.decode(ids) == record["text"]
    assert ids.count(model.tokenizer.bos_id) == 1  # the template's BOS only
