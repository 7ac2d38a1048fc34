"""OpenAI-compatible HTTP back end (a vLLM server, Ray Serve LLM, any /v1/chat/completions).

Requests ``logprobs: true, top_logprobs: 2`` and reads ``choices[0].logprobs.content[]``. Reply
conventions (EOS and stop-string tokens excluded, ``completion_tokens == len(logprobs)``):
:mod:`memroute.llm.replies`. vLLM reports every generated token, the end-of-sequence token included,
and says why it stopped in ``stop_reason`` (None = EOS, an int = a stop token, a string = a stop
string); that field is used when present.

``count_tokens`` renders the chat template locally when ``tokenizer_path`` is given, otherwise it
asks the server: vLLM's ``POST /tokenize`` (served at the server root, beside ``/v1``) takes the
same ``messages`` and applies the served model's chat template with the generation prompt.

:class:`~memroute.llm.options.GenerationOptions` go in the request body (``top_p``, ``seed``,
``presence_penalty``, ``frequency_penalty``; ``top_logprobs: max(2, k)``; ``tools`` /
``tool_choice``), and the server's ``message.tool_calls`` are read back. When a local tokenizer
folder is given and its chat template has no tools, the tools are rendered here instead (the
hermes fallback of :mod:`memroute.llm.chat`: the server gets plain messages, no ``tools``) and
the output is parsed here, so the server's prompt is the one ``count_tokens`` counts. A server
that returns hermes text instead of parsed calls (no tool parser) is parsed here too.
``tool_choice: "none"`` sends no tools at all (vLLM would otherwise still render them).

:meth:`OpenAIHTTPBackend.stream` uses ``stream: true`` (server-sent events, with
``stream_options.include_usage`` and log-probs) and builds the final reply from the chunks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memroute.errors import BackendError, InvalidRequest
from memroute.llm.chat import (
    chat_prompt_ids,
    template_inputs,
    template_supports_tools,
    text_token_count,
    tools_rendered,
)
from memroute.llm.messages import to_chat_dicts
from memroute.llm.openai_wire import (
    StreamAccumulator,
    parse_tool_call,
    plain_json,
    reported_cached,
    server_message,
)
from memroute.llm.options import MAX_TOP_LOGPROBS, GenerationOptions
from memroute.llm.replies import alt_logprob, apply_tool_calls, token_starts, tokens_before, top_n
from memroute.llm.streaming import StreamText
from memroute.types import Message, ModelReply


class OpenAIHTTPBackend:
    """A chat model behind an OpenAI-compatible server; greedy when ``temperature == 0``.

    ``base_url`` is the API root including ``/v1`` (``http://127.0.0.1:8000/v1``).
    ``generate_many`` sends up to ``max_concurrency`` requests at once: the server batches them.
    """

    def __init__(
        self,
        model_id: str,
        base_url: str,
        *,
        served_model: str | None = None,
        api_key: str | None = None,
        tokenizer_path: str | Path | None = None,
        timeout: float = 60.0,
        max_concurrency: int = 8,
    ) -> None:
        import httpx

        if not base_url or not base_url.startswith(("http://", "https://")):
            raise InvalidRequest(
                f"base_url {base_url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1",
                field="model.base_url",
            )
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        # vLLM's /tokenize lives at the server root, not under /v1.
        self.server_root = self.base_url.removesuffix("/v1")
        self.served_model = served_model or model_id
        self.max_concurrency = max(1, max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._tokenizer: Any = None
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path))

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
        body, local_tools = self._body(messages, max_tokens, stop, temperature, options)
        t0 = time.perf_counter()
        data = self._post(f"{self.base_url}/chat/completions", body)
        latency = time.perf_counter() - t0
        return self._reply(data, messages, latency, options, local_tools)

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]:
        if not batch:
            return []

        def one(messages: Sequence[Message]) -> ModelReply:
            return self.generate(messages, max_tokens=max_tokens, stop=stop,
                                 temperature=temperature, options=options)

        with ThreadPoolExecutor(max_workers=min(len(batch), self.max_concurrency)) as pool:
            return list(pool.map(one, batch))

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]:
        """Text deltas from the server's event stream, then the reply ``generate`` would give
        (rebuilt from the chunks: content, log-probs, tool calls, usage)."""
        import httpx

        body, local_tools = self._body(messages, max_tokens, stop, temperature, options)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        url = f"{self.base_url}/chat/completions"
        text = StreamText(stop, bool(options and options.tools_on))
        acc = StreamAccumulator()
        t0 = time.perf_counter()
        try:
            with self._client.stream("POST", url, json=body) as resp:
                if resp.status_code != 200:
                    resp.read()
                    raise BackendError(
                        f"{self.model_id} (served as {self.served_model!r}): {url} answered "
                        f"{resp.status_code}: {server_message(resp)}"
                    )
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    try:
                        chunk = json.loads(payload)
                    except ValueError as exc:
                        raise BackendError(
                            f"{self.model_id}: {url} streamed invalid JSON: {payload[:200]!r}"
                        ) from exc
                    if isinstance(chunk, Mapping) and chunk.get("error"):
                        raise BackendError(f"{self.model_id}: {url} streamed an error: "
                                           f"{chunk['error']}")
                    acc.add(chunk)
                    delta = text.update(acc.content)
                    if delta:
                        yield delta
        except httpx.HTTPError as exc:
            raise BackendError(f"{self.model_id}: cannot reach {url}: {exc}") from exc
        reply = self._reply(acc.completion(), messages, time.perf_counter() - t0, options,
                            local_tools)
        yield from text.ending(reply)

    def count_tokens(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int:
        if self._tokenizer is not None:
            if template_supports_tools(self._tokenizer):
                # tool_choice goes to the server as is; only "none" changes the prompt
                tool_choice = "none" if tool_choice == "none" else None
            return len(chat_prompt_ids(self._tokenizer, messages, tools, tool_choice))
        body: dict[str, Any] = {
            "model": self.served_model,
            "messages": to_chat_dicts(messages, parse_arguments=False),
            "add_generation_prompt": True,
        }
        if tools_rendered(tools, tool_choice):
            body["tools"] = [dict(t) for t in tools]
        data = self._post(f"{self.server_root}/tokenize", body)
        return self._count(data)

    def count_text_tokens(self, text: str) -> int:
        if self._tokenizer is not None:
            return text_token_count(self._tokenizer, text)
        data = self._post(
            f"{self.server_root}/tokenize",
            {"model": self.served_model, "prompt": text, "add_special_tokens": False},
        )
        return self._count(data)

    def close(self) -> None:
        self._client.close()

    # -- internals ------------------------------------------------------------------------

    def _body(
        self,
        messages: Sequence[Message],
        max_tokens: int,
        stop: Sequence[str] | None,
        temperature: float,
        options: GenerationOptions | None,
    ) -> tuple[dict[str, Any], bool]:
        """The request body, and whether tools are rendered (and parsed) here."""
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {temperature!r}",
                                 field="temperature")
        opts = options or GenerationOptions()
        k = min(max(int(opts.top_logprobs), 0), MAX_TOP_LOGPROBS) if opts.logprobs else 0
        chat = to_chat_dicts(messages, parse_arguments=False)
        has_tool_bits = any(d["role"] == "tool" or d.get("tool_calls") for d in chat)
        local_tools = (
            self._tokenizer is not None
            and (opts.tools_on or has_tool_bits)
            and not template_supports_tools(self._tokenizer)
        )
        if local_tools:  # the fallback rendering travels as plain messages
            chat, _ = template_inputs(self._tokenizer, messages, opts.tools, opts.tool_choice)
        body: dict[str, Any] = {
            "model": self.served_model,
            "messages": chat,
            "max_tokens": max_tokens,
            "temperature": float(temperature),
            "logprobs": True,
            "top_logprobs": max(2, k),
        }
        stop = [s for s in (stop or ()) if s]
        if stop:
            body["stop"] = stop
        if opts.top_p != 1.0:
            body["top_p"] = float(opts.top_p)
        if opts.seed is not None:
            body["seed"] = int(opts.seed)
        if opts.presence_penalty:
            body["presence_penalty"] = float(opts.presence_penalty)
        if opts.frequency_penalty:
            body["frequency_penalty"] = float(opts.frequency_penalty)
        if opts.tools_on and not local_tools:
            body["tools"] = [plain_json(t) for t in opts.tools]
            if opts.tool_choice is not None:
                body["tool_choice"] = plain_json(opts.tool_choice)
        return body, local_tools

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            resp = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise BackendError(f"{self.model_id}: cannot reach {url}: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(
                f"{self.model_id} (served as {self.served_model!r}): {url} answered "
                f"{resp.status_code}: {server_message(resp)}"
            )
        try:
            data = resp.json()
        except ValueError as exc:
            raise BackendError(f"{self.model_id}: {url} returned invalid JSON") from exc
        if not isinstance(data, dict):
            raise BackendError(
                f"{self.model_id}: {url} returned {type(data).__name__}, not an object"
            )
        return data

    def _count(self, data: dict[str, Any]) -> int:
        if isinstance(data.get("count"), int):
            return data["count"]
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        raise BackendError(f"{self.model_id}: /tokenize answered without a token count")

    def _reply(
        self,
        data: dict[str, Any],
        messages: Sequence[Message],
        latency: float,
        options: GenerationOptions | None = None,
        local_tools: bool = False,
    ) -> ModelReply:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            content = (choice.get("logprobs") or {}).get("content")
            server_calls = [parse_tool_call(c) for c in message.get("tool_calls") or []]
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise BackendError(f"{self.model_id}: malformed chat completion: {exc!r}") from exc
        if content is None:
            raise BackendError(
                f"{self.model_id}: the server returned no logprobs (confidence routing needs them)"
            )
        finish = choice.get("finish_reason") or "stop"
        keep = len(content)
        vllm_eos = "stop_reason" in choice and not isinstance(choice["stop_reason"], str)
        if server_calls or finish == "tool_calls":
            # the text is only the content around the calls: every generated token counts,
            # except vLLM's end-of-sequence entry
            keep -= 1 if vllm_eos else 0
        elif finish == "stop" and vllm_eos:
            keep -= 1  # vLLM: the last entry is the EOS / stop token, which is not in the text
        elif finish == "stop":
            # A stop string (or a server that reports EOS without saying so): keep the tokens
            # whose text starts inside the returned text.
            keep = tokens_before(token_starts([e.get("token") or "" for e in content]), len(text))
        keep = max(0, min(keep, len(content)))
        entries = content[:keep]
        logprobs = [float(e["logprob"]) for e in entries]
        alts = [
            alt_logprob(
                ((t.get("token"), float(t["logprob"])) for t in e.get("top_logprobs") or []),
                e.get("token"),
            )
            for e in entries
        ]
        usage = data.get("usage") or {}
        prompt_tokens = usage.get("prompt_tokens")
        if not isinstance(prompt_tokens, int):
            opts = options or GenerationOptions()
            tools = opts.tools if opts.tools_on else ()
            prompt_tokens = self.count_tokens(  # servers that omit usage
                messages, tools=tools, tool_choice=opts.tool_choice if local_tools else None
            )
        reply = ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(logprobs),
            alt_logprobs=alts,
            latency_s=latency,
            finish_reason=finish,
            cached_tokens=reported_cached(usage, prompt_tokens),
        )
        if options is not None and options.logprobs:
            k = min(max(int(options.top_logprobs), 0), MAX_TOP_LOGPROBS)
            reply.token_texts = [str(e.get("token") or "") for e in entries]
            reply.top_logprobs = [
                top_n(((t.get("token") or "", float(t["logprob"]))
                       for t in e.get("top_logprobs") or []), k)
                for e in entries
            ]
        if server_calls:
            reply.tool_calls, reply.finish_reason = server_calls, "tool_calls"
            return reply
        if finish == "tool_calls":  # a server that says so without sending calls
            reply.finish_reason = "stop"
        return apply_tool_calls(reply, options)
