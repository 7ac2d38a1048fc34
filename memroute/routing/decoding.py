"""How each tier decodes a request: the client's settings, and the greedy confidence probe.

The confidence threshold ``tau`` is calibrated on greedy answers, so a tier whose answer may
still be escalated (a *probe*: not the last tier, not pinned) decodes greedily by default
(``router.probe_decoding: greedy``) whatever temperature / top_p / seed the client sent; a
confident probe answer is returned as it was generated. The tiers that answer without a probe
(the last tier, a pinned tier) use the client's settings. ``probe_decoding: client`` probes
with the client's settings too: the confidence is then that of the sampled answer (log-probs
are the raw distribution's, so a sampled answer scores lower and escalates more often).
``max_tokens``, ``stop``, penalties, log-probs and tools apply at every tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from memroute.errors import ConfigError
from memroute.llm.base import Backend
from memroute.llm.options import GenerationOptions
from memroute.types import Message, ModelReply

PROBE_DECODING = ("greedy", "client")


@dataclass(frozen=True)
class Decoding:
    max_tokens: int
    temperature: float = 0.0
    stop: tuple[str, ...] | None = None
    options: GenerationOptions | None = None

    def key(self) -> tuple[object, ...]:
        return (self.max_tokens, self.temperature, self.stop,
                None if self.options is None else self.options.key())

    def kwargs(self) -> dict[str, object]:
        """Keyword arguments of ``generate_many`` / ``stream`` (only what differs from their
        defaults, so a back end without ``options`` still takes a plain request)."""
        kw: dict[str, object] = {"max_tokens": self.max_tokens}
        if self.temperature:
            kw["temperature"] = self.temperature
        if self.stop:
            kw["stop"] = list(self.stop)
        if self.options is not None:
            kw["options"] = self.options
        return kw

    def report(self) -> dict[str, object]:
        """What the answering call decoded with, for the response's ``memroute.decoding``."""
        opts = self.options or GenerationOptions()
        return {"temperature": self.temperature, "top_p": opts.top_p, "seed": opts.seed,
                "max_tokens": self.max_tokens}


def check_probe_decoding(value: str) -> str:
    if value not in PROBE_DECODING:
        raise ConfigError(f"router.probe_decoding must be one of {', '.join(PROBE_DECODING)}, "
                          f"got {value!r}", field="router.probe_decoding")
    return value


def decoding_for(
    *, max_tokens: int | None, temperature: float | None, stop: tuple[str, ...] | None,
    options: GenerationOptions | None, default_max_tokens: int, probing: bool, probe_decoding: str,
) -> Decoding:
    """The settings of one request at one tier; ``probing``: its answer may be escalated."""
    tokens = default_max_tokens if max_tokens is None else max_tokens
    if probing and probe_decoding == "greedy":
        if options is not None and (options.top_p != 1.0 or options.seed is not None):
            options = replace(options, top_p=1.0, seed=None)
        return Decoding(tokens, 0.0, stop, options)
    return Decoding(tokens, 0.0 if temperature is None else temperature, stop, options)


def count_prompt(backend: Backend, messages: Sequence[Message], options: GenerationOptions | None) -> int:
    """Prompt tokens with the offered tools and the tool_choice instruction (both are part of
    the prompt); without tools a back end is asked as one that knows no ``tools`` keyword."""
    if options is None or not options.tools_on:
        return backend.count_tokens(messages)
    if options.tool_choice is None:
        return backend.count_tokens(messages, tools=options.tools)
    return backend.count_tokens(messages, tools=options.tools, tool_choice=options.tool_choice)


def generate_grouped(
    backend: Backend, prompts: Sequence[Sequence[Message]], decodings: Sequence[Decoding]
) -> list[ModelReply]:
    """One engine batch per distinct setting (usually one), replies in the prompts' order."""
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, d in enumerate(decodings):
        groups.setdefault(d.key(), []).append(i)
    out: list[ModelReply | None] = [None] * len(prompts)
    for members in groups.values():
        kw = decodings[members[0]].kwargs()
        replies = backend.generate_many([prompts[i] for i in members], **kw)  # type: ignore[arg-type]
        for i, r in zip(members, replies, strict=True):
            out[i] = r
    return out  # type: ignore[return-value]
