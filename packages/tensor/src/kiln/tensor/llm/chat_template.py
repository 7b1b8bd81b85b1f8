"""Chat prompts: the model's own chat template, a Jinja program, run in jinja2's immutable sandbox.

Every GGUF file (`tokenizer.chat_template`) and Hugging Face folder (`chat_template.jinja`, or tokenizer_config.json
`chat_template`) ships its chat format as a Jinja template. kiln runs it the way transformers' `apply_chat_template`
does, so a prompt is the text the model was trained on: the same environment (`trim_blocks`, `lstrip_blocks`, the
`loopcontrols` extension), the same helpers (`raise_exception`, `strftime_now`, a `tojson` that does not escape
HTML, `dict`, a `namespace` without underscore names) and the same variables (`messages`, `tools`, `documents`,
`add_generation_prompt` and the special tokens: `bos_token`, `eos_token`, ...). Templates are untrusted code:
`ImmutableSandboxedEnvironment` refuses attribute access to Python internals and mutation of the values passed in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.sandbox
import jinja2.utils

__all__ = ["ChatTemplate", "validate_messages"]

_ROLES = ("system", "user", "assistant", "tool")


def validate_messages(messages: object) -> list[dict[str, Any]]:
    """`messages` as a list of {"role", "content", ...} with known roles, or ValueError saying why.

    Content is a string (OpenAI text parts are joined), or None for an assistant message that carries `tool_calls`.
    Other keys (`tool_calls`, `tool_call_id`, `name`, ...) are passed on to the template; keys set to None are left
    out.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ValueError(f"messages must be a non-empty list of {{'role', 'content'}} objects, got {messages!r:.80}")
    checked = []
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{position}] must be an object with 'role' and 'content', got {message!r:.80}")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"messages[{position}].role must be one of {list(_ROLES)}, got {role!r}")
        if isinstance(content, list):  # OpenAI content parts: the text parts, in order
            texts = [part.get("text") for part in content if isinstance(part, Mapping) and part.get("type") == "text"]
            if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
                raise ValueError(f"messages[{position}].content parts must all be text parts")
            content = "".join(str(t) for t in texts)
        if content is None and role == "assistant" and message.get("tool_calls"):
            pass
        elif not isinstance(content, str):
            raise ValueError(f"messages[{position}].content must be a string, got {type(content).__name__}")
        # keys set to None are dropped, as transformers does: templates test for a missing key, not for None
        plain = {str(key): value for key, value in message.items() if value is not None}
        checked.append({**plain, "role": str(role)} | ({} if content is None else {"content": content}))
    return checked


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja2's own tojson escapes <, >, & and ' for HTML; chat templates expect plain JSON
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """`dict(...)` inside a template, without handing the template the `dict` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


class _TemplateNamespace(jinja2.utils.Namespace):
    """jinja2's `namespace` refusing underscore names, which could reach the interpreter's internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja2's signature trick: `namespace(self=...)` still works
        self, rest = args[0], args[1:]
        for name in dict(*rest, **kwargs):
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, *rest, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        super().__setitem__(name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a chat template may not store the attribute {name!r}")


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    version = tuple(int(part) for part in re.findall(r"\d+", jinja2.__version__)[:3])
    if version < (3, 1, 6):  # earlier releases have known sandbox escapes, and templates are untrusted code
        raise ImportError(f"chat templates need jinja2 >= 3.1.6 (its sandbox fixes), found {jinja2.__version__}")
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    environment.globals["dict"] = _TemplateDict()
    environment.globals["namespace"] = _TemplateNamespace
    return environment


class ChatTemplate:
    """A model's chat template, compiled once; `render` turns a conversation into the prompt text.

    Args:
        source: the Jinja text of the template.
        special_tokens: the special-token variables the template sees (`bos_token`, `eos_token`, ...), as
            transformers passes its tokenizer's special tokens map.
        origin: where the template came from, for messages (e.g. "tokenizer_config.json chat_template").

    Raises:
        ValueError: the text is not a valid Jinja template.
    """

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None, origin: str = "given") -> None:
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"a chat template must be non-empty Jinja text, got {source!r:.80} ({origin})")
        self.source, self.origin = source, origin
        self.special_tokens = dict(special_tokens or {})
        try:
            self._template = _environment().from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as error:
            message = f"the chat template ({origin}) is not valid Jinja: {error} (line {error.lineno})"
            raise ValueError(message) from None

    @property
    def family(self) -> str:
        """What the CLI shows as the chat format: the template's origin."""
        return f"jinja template from {self.origin}"

    def __repr__(self) -> str:
        return f"<ChatTemplate from {self.origin}, {len(self.source)} characters>"

    def render(
        self,
        messages: Sequence[Mapping[str, object]],
        add_generation_prompt: bool = True,
        *,
        tools: Sequence[Mapping[str, object]] | None = None,
        documents: Sequence[Mapping[str, object]] | None = None,
        **variables: object,
    ) -> str:
        """The prompt text of a conversation, ending with the assistant's turn opened when `add_generation_prompt`.

        `tools` are OpenAI-style JSON schemas, as transformers passes them; further `variables` (e.g.
        `enable_thinking=False`) reach the template as they are.

        Raises:
            ValueError: the messages are malformed, the template refused them (`raise_exception`), or it tried an
                operation the sandbox forbids.
        """
        checked = validate_messages(messages)
        if tools is not None and (isinstance(tools, (str, Mapping)) or not all(isinstance(t, Mapping) for t in tools)):
            raise ValueError(f"tools must be a list of JSON-schema objects, got {tools!r:.80}")
        context = {**self.special_tokens, **variables}
        try:
            return self._template.render(
                messages=checked,
                tools=None if tools is None else [dict(t) for t in tools],
                documents=None if documents is None else [dict(d) for d in documents],
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        except jinja2.exceptions.SecurityError as error:
            message = f"the chat template ({self.origin}) tried something the sandbox forbids: {error}"
            raise ValueError(message) from None
        except jinja2.exceptions.TemplateError as error:
            raise ValueError(f"the chat template ({self.origin}) refused the conversation: {error}") from None
