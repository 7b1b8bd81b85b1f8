"""Chat prompts: the model's chat template, recognized among the common formats, rendered without a Jinja engine.

Models ship their chat format as a Jinja template (GGUF `tokenizer.chat_template`, tokenizer_config.json
`chat_template`). kiln does not run Jinja; it recognizes the template's family by its markers and renders that
family's format itself:
- "llama3": `<|start_header_id|>role<|end_header_id|>\\n\\n` + trimmed content + `<|eot_id|>`, the BOS token
  before the first message, and `<|start_header_id|>assistant<|end_header_id|>\\n\\n` as the generation prompt.
- "chatml" (Qwen2, Qwen2.5, Qwen3 without tools or thinking): `<|im_start|>role\\n` + content + `<|im_end|>\\n`, with
  the template's default system message (when it has one) put first when the conversation has none, and
  `<|im_start|>assistant\\n` as the generation prompt.
- "plain", the documented fallback for a model without a template or with one of another family: one line
  `role: content` per message, then `assistant:` (the tokenizer adds its BOS token as for any prompt). A model
  trained on another format will answer worse with it; the CLI says which format it uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["ChatTemplate", "validate_messages"]

_ROLES = ("system", "user", "assistant", "tool")
_DEFAULT_SYSTEM = re.compile(r"<\|im_start\|>system(?:\\n|\n)(.*?)<\|im_end\|>", re.DOTALL)


def validate_messages(messages: object) -> list[dict[str, str]]:
    """`messages` as a list of {"role", "content"} with known roles and string content, or ValueError saying why."""
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
            content = "".join(texts)  # type: ignore[arg-type]
        if not isinstance(content, str):
            raise ValueError(f"messages[{position}].content must be a string, got {type(content).__name__}")
        checked.append({"role": str(role), "content": content})
    return checked


@dataclass(frozen=True)
class ChatTemplate:
    """A chat format: `family` ("llama3", "chatml" or "plain"), the BOS text, and chatml's default system message."""

    family: str
    bos_token: str = ""
    default_system: str | None = None

    @classmethod
    def from_template(cls, template: str | None, bos_token: str = "") -> ChatTemplate:
        """The format a model's Jinja chat template belongs to (the "plain" fallback when none is recognized)."""
        if not template:
            return cls("plain", bos_token)
        if "<|start_header_id|>" in template and "<|eot_id|>" in template:
            return cls("llama3", bos_token)
        if "<|im_start|>" in template and "<|im_end|>" in template:
            found = _DEFAULT_SYSTEM.search(template)
            default = found.group(1).replace("\\n", "\n") if found and "messages[0]" in template else None
            return cls("chatml", "", default)
        return cls("plain", bos_token)

    def render(self, messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> str:
        """The prompt text of a conversation, ending with the assistant's turn opened when `add_generation_prompt`."""
        checked = validate_messages(messages)
        if self.family == "llama3":
            parts = [
                f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>" for m in checked
            ]
            text = self.bos_token + "".join(parts)
            return text + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")
        if self.family == "chatml":
            if self.default_system is not None and checked[0]["role"] != "system":
                checked.insert(0, {"role": "system", "content": self.default_system})
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in checked)
            return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
        text = "".join(f"{m['role']}: {m['content']}\n" for m in checked)  # BOS: the tokenizer's own setting
        return text + ("assistant:" if add_generation_prompt else "")

    @property
    def writes_bos(self) -> bool:
        """Whether the rendered text carries the BOS token itself (then encoding must not add another)."""
        return self.family != "plain"
