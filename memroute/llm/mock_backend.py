"""A deterministic back end behind the real :class:`~memroute.llm.base.Backend` protocol.

Why: the Router, the Serve app and the benchmarks can then run end to end in seconds without
model weights, and a test decides cascade escalation through the log-probs it configures (as
Ray Serve LLM's mock engine does). Replies follow the conventions of :mod:`memroute.llm.chat`:
``completion_tokens == len(logprobs)``, ``alt_logprobs <= logprobs``, and ``count_tokens`` equals
``prompt_tokens`` because both go through :func:`~memroute.llm.chat.chat_prompt_ids`.

Token counts come from a Hugging Face tokenizer folder (rendered with its chat template, like
the real engines) or, without one, from :class:`SimpleTokenizer`, which the Serve ingress can
load too (``serve/tokenizers.py``) so its local counts are the engine's.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from memroute.errors import BackendUnavailable, ConfigError, InvalidRequest
from memroute.llm.chat import chat_prompt_ids, cut_at_stop, text_token_count, to_chat_dicts
from memroute.types import Message, ModelReply

DEFAULT_ANSWER = "I do not know."
DEFAULT_MEMORY_ANSWER = "{memory_a}"  # echo what was answered in the most recent memory
_RULE_KEYS = ("match", "memories", "logprob", "margin", "answer")
_PIECE = re.compile(r"\s*(?:\w+|[^\w\s])")  # a word or one punctuation mark, with leading space
# An injected memory: "- " + TurnPair.text(), i.e. "- [8 May 2023] Q: ... / A: ...".
_MEMORY_START = re.compile(r"^- \[[^\]\n]*\] Q: ", re.MULTILINE)
_MEMORY = re.compile(r"- (?P<line>\[[^\]\n]*\] Q: (?P<q>.*?) / A: (?P<a>.*))", re.DOTALL)


class SimpleTokenizer:
    """Words and punctuation marks over a fixed textual chat rendering.

    Implements just what :mod:`memroute.llm.chat` calls (``apply_chat_template``, ``encode``,
    ``decode``), so engine and ingress count through the same functions. Ids are stable hashes;
    ``decode`` knows the pieces this instance has encoded.
    """

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
        conversation: Sequence[Mapping[str, str]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **_: Any,
    ) -> list[int] | str:
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


@dataclass(frozen=True)
class Rule:
    """Matched on the last user message (``re.search``) and/or on injected memories.

    ``logprob``: one value, or a list cycled over the tokens (so min-token and mean differ);
    ``margin``: nats between each chosen token and its runner-up (top-2 confidence);
    ``answer``: a template with ``{query}``, ``{memory}``, ``{memory_q}``, ``{memory_a}``.
    """

    match: re.Pattern[str] | None
    memories: bool | None
    logprob: tuple[float, ...] | None
    margin: float | None
    answer: str | None

    def applies(self, query: str, has_memories: bool) -> bool:
        if self.memories is not None and self.memories != has_memories:
            return False
        return self.match is None or self.match.search(query) is not None


def _logprobs(value: Any, field: str) -> tuple[float, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0 for v in values
    ):
        raise ConfigError(
            f"{field} must be a log-probability <= 0 or a non-empty list of them, got {value!r}",
            field=field,
        )
    return tuple(float(v) for v in values)


def _non_negative(value: Any, field: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{field} must be a number >= 0, got {value!r}", field=field)
    return float(value)


def _template(value: Any, field: str) -> str:
    """An answer template, checked now so a stray brace fails at load, not on a request."""
    try:
        value.format(query="", memory="", memory_q="", memory_a="")
    except (AttributeError, KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"{field} must be a string using only {{query}}, {{memory}}, {{memory_q}}, "
            f"{{memory_a}}: {exc!r}",
            field=field,
        ) from None
    return value


def parse_rule(raw: Any, field: str) -> Rule:
    """One ``engine_args.rules`` entry, refused with the offending field named."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{field} must be a mapping with keys {', '.join(_RULE_KEYS)}", field=field
        )
    unknown = sorted(set(raw) - set(_RULE_KEYS))
    if unknown:
        raise ConfigError(
            f"{field}.{unknown[0]} is not a rule key. Available: {', '.join(_RULE_KEYS)}",
            field=f"{field}.{unknown[0]}",
        )
    match = raw.get("match")
    try:
        pattern = re.compile(match) if match is not None else None
    except (re.error, TypeError) as exc:
        raise ConfigError(
            f"{field}.match is not a regular expression: {exc}", field=f"{field}.match"
        ) from None
    memories = raw.get("memories")
    if memories is not None and not isinstance(memories, bool):
        raise ConfigError(
            f"{field}.memories must be true, false or null", field=f"{field}.memories"
        )
    answer = raw.get("answer")
    answer = _template(answer, f"{field}.answer") if answer is not None else None
    logprob = (
        _logprobs(raw["logprob"], f"{field}.logprob") if raw.get("logprob") is not None else None
    )
    margin = (
        _non_negative(raw["margin"], f"{field}.margin") if raw.get("margin") is not None else None
    )
    return Rule(pattern, memories, logprob, margin, answer)


def latest_memory(system: str) -> tuple[str, str, str] | None:
    """``(memory, question, answer)`` of the latest injected memory, or None.

    Found by the memory lines' own shape, not by the routing layer's block header (back ends sit
    below routing). The block closes the system prompt in chronological order: the last is newest.
    """
    starts = [m.start() for m in _MEMORY_START.finditer(system)]
    if not starts:
        return None
    m = _MEMORY.match(system.rstrip(), starts[-1])
    return (m["line"], m["q"], m["a"]) if m else (system[starts[-1] + 2 :].rstrip(), "", "")


class MockBackend:
    """Deterministic replies: the first rule that applies sets the answer and the log-probs.

    Without a rule's answer: ``memory_answer`` when memories were injected, else ``answer``.
    Temperature is accepted and ignored (every reply is the greedy one).
    """

    def __init__(
        self,
        model_id: str,
        tokenizer_path: str | Path | None = None,
        *,
        answer: str = DEFAULT_ANSWER,
        memory_answer: str = DEFAULT_MEMORY_ANSWER,
        logprob: float | Sequence[float] = -0.05,
        margin: float = 2.0,
        rules: Sequence[Mapping[str, Any]] = (),
        latency_s: float = 0.0,
        down_when_exists: str | Path | None = None,
    ) -> None:
        if isinstance(rules, (str, Mapping)) or not isinstance(rules, Sequence):
            raise ConfigError(
                "model.engine_args.rules must be a list of rules", field="model.engine_args.rules"
            )
        lp = _logprobs(logprob, "model.engine_args.logprob")
        self.default = Rule(None, None, lp, _non_negative(margin, "model.engine_args.margin"), None)
        self.rules = [parse_rule(r, f"model.engine_args.rules[{i}]") for i, r in enumerate(rules)]
        self.latency_s = _non_negative(latency_s, "model.engine_args.latency_s")
        # Fault injection for tests: while this file exists, every call fails as a down engine.
        self.down_when_exists = Path(down_when_exists) if down_when_exists else None
        self.model_id = model_id
        self.answer = _template(answer, "model.engine_args.answer")
        self.memory_answer = _template(memory_answer, "model.engine_args.memory_answer")
        self.tokenizer: Any = SimpleTokenizer()
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(Path(tokenizer_path).expanduser()))

    # -- protocol -------------------------------------------------------------------------

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> ModelReply:
        return self.generate_many(
            [messages], max_tokens=max_tokens, stop=stop, temperature=temperature
        )[0]

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> list[ModelReply]:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise InvalidRequest(
                f"max_tokens must be a positive integer, got {max_tokens!r}", field="max_tokens"
            )
        if temperature < 0:
            raise InvalidRequest(
                f"temperature must be >= 0, got {temperature!r}", field="temperature"
            )
        if self.down_when_exists is not None and self.down_when_exists.exists():
            raise BackendUnavailable(
                f"{self.model_id} is down ({self.down_when_exists} exists)", field="model"
            )
        t0 = time.perf_counter()
        replies = [self._reply(m, max_tokens, stop) for m in batch]
        if self.latency_s and replies:
            time.sleep(self.latency_s)  # one simulated engine call per batch
        latency = time.perf_counter() - t0
        for r in replies:  # like an in-process engine: every reply carries the batch's time
            r.latency_s = latency
        return replies

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(chat_prompt_ids(self.tokenizer, messages))

    def count_text_tokens(self, text: str) -> int:
        return text_token_count(self.tokenizer, text)

    def close(self) -> None:
        pass

    # -- internals ------------------------------------------------------------------------

    def pick(self, messages: Sequence[Message]) -> tuple[Rule, str]:
        """The rule that applies to ``messages`` and the answer text it gives."""
        chat = to_chat_dicts(messages)
        query = next((m["content"] for m in reversed(chat) if m["role"] == "user"), "")
        system = "\n".join(m["content"] for m in chat if m["role"] == "system")
        memory = latest_memory(system)
        rule = next((r for r in self.rules if r.applies(query, memory is not None)), self.default)
        fallback = self.memory_answer if memory is not None else self.answer
        template = fallback if rule.answer is None else rule.answer
        line, q, a = memory or ("", "", "")
        return rule, template.format(query=query, memory=line, memory_q=q, memory_a=a)

    def _reply(
        self, messages: Sequence[Message], max_tokens: int, stop: Sequence[str] | None
    ) -> ModelReply:
        prompt_tokens = self.count_tokens(messages)
        rule, answer = self.pick(messages)
        ids = self.tokenizer.encode(answer, add_special_tokens=False)
        decode = self.tokenizer.decode
        starts = [len(decode(ids[:i], skip_special_tokens=True)) for i in range(len(ids))]
        text, keep, _ = cut_at_stop(decode(ids, skip_special_tokens=True), starts, stop)
        finish = "stop"  # the answer ended (end of sequence) or a stop string cut it
        if keep > max_tokens:
            keep, finish = max_tokens, "length"
            text = decode(ids[:keep], skip_special_tokens=True)
        pattern = rule.logprob or self.default.logprob or (0.0,)
        margin = rule.margin if rule.margin is not None else (self.default.margin or 0.0)
        logprobs = [pattern[i % len(pattern)] for i in range(keep)]
        return ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs,
            prompt_tokens=prompt_tokens,
            completion_tokens=keep,
            alt_logprobs=[lp - margin for lp in logprobs],
            finish_reason=finish,
        )
