"""A tokenizer without model files: words and punctuation marks over a fixed chat rendering.

The mock engine counts with it when no tokenizer folder is configured, and the Serve ingress
loads the same class (``serve/tokenizers.py``), so local counts equal the engine's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memroute.llm.chat import template_inputs

_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")  # a word or one punctuation mark, with leading space


class SimpleTokenizer:
    """Words and punctuation marks over a fixed textual chat rendering.

    Implements just what :mod:`memroute.llm.chat` calls (``apply_chat_template``, ``encode``,
    ``decode``), so engine and ingress count through the same functions. Ids are stable hashes;
    ``decode`` knows the pieces this instance has encoded. It has no tool-aware template
    (``chat_template`` is None): tools and tool messages get :mod:`memroute.llm.chat`'s
    fallback rendering, also when passed straight to :meth:`apply_chat_template`.
    """

    chat_template = None

    def __init__(self) -> None:
        self._pieces: dict[int, str] = {}

    @staticmethod
    def render(
        conversation: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in conversation)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **_: Any,
    ) -> list[int] | str:
        if tools or any(m.get("role") == "tool" or m.get("tool_calls") for m in conversation):
            conversation, _tools = template_inputs(self, conversation, tools or ())
        text = self.render(conversation, add_generation_prompt)
        return self.encode(text) if tokenize else text

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        for piece in _PIECE.findall(text):
            i = int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "big")
            self._pieces.setdefault(i, piece)
            ids.append(i)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "".join(self._pieces[int(i)] for i in ids)
