"""OpenAI-compatible HTTP back end (a vLLM server, Ray Serve LLM, any /v1/chat/completions).

Requests ``logprobs: true, top_logprobs: 2`` and reads ``choices[0].logprobs.content[]``. Reply
conventions (EOS and stop-string tokens excluded, ``completion_tokens == len(logprobs)``):
:mod:`memroute.llm.chat`. vLLM reports every generated token, the end-of-sequence token included,
and says why it stopped in ``stop_reason`` (None = EOS, an int = a stop token, a string = a stop
string); that field is used when present.

``count_tokens`` renders the chat template locally when ``tokenizer_path`` is given, otherwise it
asks the server: vLLM's ``POST /tokenize`` (served at the server root, beside ``/v1``) takes the
same ``messages`` and applies the served model's chat template with the generation prompt.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from memroute.errors import BackendError, InvalidRequest
from memroute.llm.chat import (
    alt_logprob,
    chat_prompt_ids,
    text_token_count,
    to_chat_dicts,
    token_starts,
    tokens_before,
)
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
        self.server_root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
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
    ) -> ModelReply:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {temperature!r}",
                                 field="temperature")
        body: dict[str, Any] = {
            "model": self.served_model,
            "messages": to_chat_dicts(messages),
            "max_tokens": max_tokens,
            "temperature": float(temperature),
            "logprobs": True,
            "top_logprobs": 2,
        }
        stop = [s for s in (stop or ()) if s]
        if stop:
            body["stop"] = stop
        t0 = time.perf_counter()
        data = self._post(f"{self.base_url}/chat/completions", body)
        latency = time.perf_counter() - t0
        return self._reply(data, messages, latency)

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> list[ModelReply]:
        if not batch:
            return []

        def one(messages: Sequence[Message]) -> ModelReply:
            return self.generate(messages, max_tokens=max_tokens, stop=stop,
                                 temperature=temperature)

        with ThreadPoolExecutor(max_workers=min(len(batch), self.max_concurrency)) as pool:
            return list(pool.map(one, batch))

    def count_tokens(self, messages: Sequence[Message]) -> int:
        if self._tokenizer is not None:
            return len(chat_prompt_ids(self._tokenizer, messages))
        data = self._post(
            f"{self.server_root}/tokenize",
            {"model": self.served_model, "messages": to_chat_dicts(messages),
             "add_generation_prompt": True},
        )
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

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            resp = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise BackendError(f"{self.model_id}: cannot reach {url}: {exc}") from exc
        if resp.status_code != 200:
            raise BackendError(
                f"{self.model_id} (served as {self.served_model!r}): {url} answered "
                f"{resp.status_code}: {_server_message(resp)}"
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
        self, data: dict[str, Any], messages: Sequence[Message], latency: float
    ) -> ModelReply:
        try:
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
            content = (choice.get("logprobs") or {}).get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BackendError(f"{self.model_id}: malformed chat completion: {exc!r}") from exc
        if content is None:
            raise BackendError(
                f"{self.model_id}: the server returned no logprobs (confidence routing needs them)"
            )
        finish = choice.get("finish_reason") or "stop"
        keep = len(content)
        vllm_eos = "stop_reason" in choice and not isinstance(choice["stop_reason"], str)
        if finish == "stop" and vllm_eos:
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
            prompt_tokens = self.count_tokens(messages)  # servers that omit usage
        return ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(logprobs),
            alt_logprobs=alts,
            latency_s=latency,
            finish_reason=finish,
        )


def _server_message(resp: Any) -> str:
    """The error text of an OpenAI-style (or FastAPI) error body, else the start of the body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if body.get(key):
                return str(body[key])[:500]
    return str(body)[:500]
