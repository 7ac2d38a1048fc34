"""Per-request decoding settings a client sends, beyond ``max_tokens`` / ``stop`` / ``temperature``.

Those three stay keyword arguments of :meth:`Backend.generate_many` (every caller has them);
the rest travel as one :class:`GenerationOptions` (``options=None``: the engine's defaults, what
the benchmarks use). The back ends honour each field where their engine has it; see each
back end's docstring for the exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs


@dataclass(frozen=True)
class GenerationOptions:
    top_p: float = 1.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # The client's `logprobs: true`: fill ModelReply.token_texts / top_logprobs, with
    # `top_logprobs` alternatives per token (0..MAX_TOP_LOGPROBS).
    logprobs: bool = False
    top_logprobs: int = 0
    # OpenAI chat tools ([{"type": "function", "function": {name, description, parameters}}])
    # and tool_choice ("auto" | "none" | "required" | {"type": "function", "function": {"name"}}).
    tools: tuple[Mapping[str, Any], ...] = ()
    tool_choice: str | Mapping[str, Any] | None = None
    # The output must be JSON matching this JSON Schema (fact extraction). vLLM constrains its
    # decoding to it (structured outputs); every caller still validates what comes back.
    json_schema: Mapping[str, Any] | None = None

    @property
    def tools_on(self) -> bool:
        """Whether the model is offered the tools (``tool_choice: none`` withholds them)."""
        return bool(self.tools) and self.tool_choice != "none"

    def key(self) -> str:
        """A hashable identity, to batch requests with equal options together."""
        return json.dumps(asdict(self), sort_keys=True, default=str)

    def required_tool(self) -> str | None:
        """The function name ``tool_choice`` forces, ``"*"`` for ``required``, else None."""
        choice = self.tool_choice
        if choice == "required":
            return "*"
        if isinstance(choice, Mapping):
            fn = choice.get("function")
            return fn.get("name") if isinstance(fn, Mapping) else None
        return None
