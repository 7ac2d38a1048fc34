"""A deterministic back end behind the real :class:`~memroute.llm.base.Backend` protocol.

Why: the Router, the Serve app and the benchmarks can then run end to end in seconds without
model weights, and a test decides cascade escalation through the log-probs it configures (as
Ray Serve LLM's mock engine does). Replies follow the conventions of :mod:`memroute.llm.replies`:
``completion_tokens == len(logprobs)``, ``alt_logprobs <= logprobs``, and ``count_tokens`` equals
``prompt_tokens`` because both go through :func:`~memroute.llm.chat.chat_prompt_ids`.

Token counts come from a Hugging Face tokenizer folder (rendered with its chat template, like
the real engines) or, without one, from :class:`SimpleTokenizer`, which the Serve ingress can
load too (``serve/tokenizers.py``) so its local counts are the engine's.

:class:`~memroute.llm.options.GenerationOptions`: sampling settings (``top_p``, ``seed``, the
penalties, temperature) are accepted and ignored, every reply is the deterministic one; the last
options a call got are kept in ``last_options`` so tests can see they arrived. ``logprobs``
fills ``token_texts`` (the tokenizer's pieces) and ``top_logprobs`` (the chosen piece, then
synthetic alternatives ``<alt1>``, ``<alt2>``... at ``logprob - margin``, ``- margin - 1``...).

Tools (deterministic): with tools on and a last message that is not a ``tool`` message, the
mock calls the function ``tool_choice`` names, else the first offered one, with arguments built
from the function's JSON-schema ``required`` properties (strings get the last user message's
text, numbers and integers 1, booleans true, arrays [], objects {}). The call is generated as
hermes text (``<tool_call>{...}</tool_call>``) and parsed like any engine's output, so tokens,
log-probs, ``max_tokens`` and stop strings apply to it as to an answer. When the last message is
a ``tool`` message the mock answers with ``tool_answer`` (default ``"{tool_result}"``: the tool
message's content), so a two-step tool loop completes.

Streaming (:meth:`MockBackend.stream`) yields the answer piece by piece, sleeping
``token_latency_s`` between pieces; ``generate`` costs the same simulated time (the longest
reply of the batch times ``token_latency_s``, plus ``latency_s`` per engine call).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from memroute.errors import BackendUnavailable, ConfigError, InvalidRequest
from memroute.llm.chat import (
    chat_prompt_ids,
    options_tools,
    render_tool_call,
    text_token_count,
)
from memroute.llm.messages import to_chat_dicts
from memroute.llm.mock_rules import (
    Rule,
    answer_template,
    latest_memory,
    logprob_values,
    non_negative,
    parse_rule,
)
from memroute.llm.options import GenerationOptions
from memroute.llm.prefix_cache import PrefixCounter
from memroute.llm.replies import apply_tool_calls, cut_at_stop
from memroute.llm.simple_tokenizer import SimpleTokenizer
from memroute.llm.streaming import StreamText
from memroute.llm.tool_calls import tool_names
from memroute.types import Message, ModelReply

DEFAULT_ANSWER = "I do not know."
DEFAULT_MEMORY_ANSWER = "{memory_a}"  # echo what was answered in the most recent memory
DEFAULT_TOOL_ANSWER = "{tool_result}"  # after a tool call: echo the tool's result


class MockBackend:
    """Deterministic replies: the first rule that applies sets the answer and the log-probs.

    Without a rule's answer: ``memory_answer`` when memories were injected, else ``answer``;
    after a tool message ``tool_answer``; with tools on, a call (see the module docstring).
    Temperature and the sampling options are accepted and ignored (every reply is the greedy
    one).
    """

    def __init__(
        self,
        model_id: str,
        tokenizer_path: str | Path | None = None,
        *,
        answer: str = DEFAULT_ANSWER,
        memory_answer: str = DEFAULT_MEMORY_ANSWER,
        tool_answer: str = DEFAULT_TOOL_ANSWER,
        logprob: float | Sequence[float] = -0.05,
        margin: float = 2.0,
        rules: Sequence[Mapping[str, Any]] = (),
        latency_s: float = 0.0,
        token_latency_s: float = 0.0,
        down_when_exists: str | Path | None = None,
    ) -> None:
        if isinstance(rules, (str, Mapping)) or not isinstance(rules, Sequence):
            raise ConfigError(
                "model.engine_args.rules must be a list of rules", field="model.engine_args.rules"
            )
        lp = logprob_values(logprob, "model.engine_args.logprob")
        self.default = Rule(None, None, lp, non_negative(margin, "model.engine_args.margin"), None)
        self.rules = [parse_rule(r, f"model.engine_args.rules[{i}]") for i, r in enumerate(rules)]
        self.latency_s = non_negative(latency_s, "model.engine_args.latency_s")
        self.token_latency_s = non_negative(token_latency_s, "model.engine_args.token_latency_s")
        # Fault injection for tests: while this file exists, every call fails as a down engine.
        self.down_when_exists = Path(down_when_exists) if down_when_exists else None
        self.model_id = model_id
        self.prefix_cache = PrefixCounter()  # the prefix-cache hits a caching engine would have
        self.answer = answer_template(answer, "model.engine_args.answer")
        self.memory_answer = answer_template(memory_answer, "model.engine_args.memory_answer")
        self.tool_answer = answer_template(tool_answer, "model.engine_args.tool_answer")
        self.last_options: GenerationOptions | None = None  # what the latest call asked for
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
        options: GenerationOptions | None = None,
    ) -> ModelReply:
        return self.generate_many(
            [messages], max_tokens=max_tokens, stop=stop, temperature=temperature, options=options
        )[0]

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]:
        self._check(max_tokens, temperature, options)
        t0 = time.perf_counter()
        replies = [self._reply(m, max_tokens, stop, options)[0] for m in batch]
        if replies:  # one simulated engine call per batch, as long as its longest reply
            wait = self.latency_s + self.token_latency_s * max(r.completion_tokens for r in replies)
            if wait:
                time.sleep(wait)
        latency = time.perf_counter() - t0
        for r in replies:  # like an in-process engine: every reply carries the batch's time
            r.latency_s = latency
        return replies

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]:
        """Text deltas piece by piece (``token_latency_s`` apart), then the reply ``generate``
        gives for the same arguments (its ``latency_s``: this stream's duration)."""
        self._check(max_tokens, temperature, options)
        t0 = time.perf_counter()
        reply, ids = self._reply(messages, max_tokens, stop, options)
        if self.latency_s:
            time.sleep(self.latency_s)  # the simulated time to the first token
        text = StreamText(stop, bool(options and options.tools_on))
        decode = self.tokenizer.decode
        for i in range(min(len(ids), max_tokens)):
            if i and self.token_latency_s:
                time.sleep(self.token_latency_s)
            so_far = decode(ids[: i + 1], skip_special_tokens=True)
            delta = text.update(so_far)
            if delta:
                yield delta
            if text.stopped(so_far):
                break
        reply.latency_s = time.perf_counter() - t0
        yield from text.ending(reply)

    def count_tokens(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int:
        return len(chat_prompt_ids(self.tokenizer, messages, tools, tool_choice))

    def count_text_tokens(self, text: str) -> int:
        return text_token_count(self.tokenizer, text)

    def close(self) -> None:
        pass

    # -- internals ------------------------------------------------------------------------

    def _check(
        self, max_tokens: int, temperature: float, options: GenerationOptions | None
    ) -> None:
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
        self.last_options = options

    def pick(
        self, messages: Sequence[Message], options: GenerationOptions | None = None
    ) -> tuple[Rule, str]:
        """The rule that applies to ``messages`` and the text it generates (an answer, or a
        tool call as hermes text)."""
        chat = to_chat_dicts(messages)
        query = next((m["content"] for m in reversed(chat) if m["role"] == "user"), "")
        system = "\n".join(m["content"] for m in chat if m["role"] == "system")
        memory = latest_memory(system)
        rule = next((r for r in self.rules if r.applies(query, memory is not None)), self.default)
        after_tool = chat[-1]["role"] == "tool"
        if not after_tool and options is not None and options.tools_on:
            call = self.tool_call(options, query)
            if call is not None:
                return rule, call
        fallback = self.memory_answer if memory is not None else self.answer
        template = fallback if rule.answer is None else rule.answer
        if after_tool:
            template = self.tool_answer
        line, q, a = memory or ("", "", "")
        result = chat[-1]["content"] if after_tool else ""
        return rule, template.format(
            query=query, memory=line, memory_q=q, memory_a=a, tool_result=result
        )

    @staticmethod
    def tool_call(options: GenerationOptions, query: str) -> str | None:
        """The hermes text of the call the mock makes (None when no offered tool has a name)."""
        names = tool_names(options.tools)
        if not names:
            return None
        forced = options.required_tool()
        name = forced if forced in names else names[0]
        tool = next(t for t in options.tools if name in tool_names([t]))
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        params = fn.get("parameters") if isinstance(fn.get("parameters"), Mapping) else {}
        props = params.get("properties") if isinstance(params.get("properties"), Mapping) else {}
        args: dict[str, Any] = {}
        for key in params.get("required") or ():
            prop = props.get(key) if isinstance(props.get(key), Mapping) else {}
            kind = prop.get("type")
            if isinstance(kind, list):  # ["string", "null"]: the first non-null type
                kind = next((k for k in kind if k != "null"), "string")
            args[str(key)] = {"number": 1, "integer": 1, "boolean": True, "array": [],
                              "object": {}}.get(kind, query)
        return render_tool_call(name, json.dumps(args, ensure_ascii=False))

    def _reply(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        stop: Sequence[str] | None,
        options: GenerationOptions | None = None,
    ) -> tuple[ModelReply, list[int]]:
        """The reply and the token ids of the whole answer (before any cut)."""
        tools, tool_choice = options_tools(options)
        count: dict[str, Any] = {"tools": tools} if tools else {}
        if tools and tool_choice not in (None, "auto"):  # "required", "none", a named function
            count["tool_choice"] = tool_choice
        prompt_tokens = self.count_tokens(messages, **count)  # a subclass may count its own way
        rule, answer = self.pick(messages, options)
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
        reply = ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs,
            prompt_tokens=prompt_tokens,
            completion_tokens=keep,
            alt_logprobs=[lp - margin for lp in logprobs],
            finish_reason=finish,
            cached_tokens=min(prompt_tokens, self.prefix_cache.cached(
                chat_prompt_ids(self.tokenizer, messages, tools, tool_choice))),
        )
        if options is not None and options.logprobs:
            pieces = [decode([t], skip_special_tokens=False) for t in ids[:keep]]
            reply.token_texts = pieces
            reply.top_logprobs = [
                [(piece, lp)] + [(f"<alt{k}>", lp - margin - (k - 1)) for k in range(1, 20)]
                for piece, lp in zip(pieces, logprobs)
            ]
            reply.top_logprobs = [alts[: options.top_logprobs] for alts in reply.top_logprobs]
        return apply_tool_calls(reply, options), ids
