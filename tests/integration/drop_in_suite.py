"""An agent's view of memroute: the unmodified ``openai`` client pointed at the endpoint, nothing
else changed. One suite, run against each deployed preset by a subclass that sets ``url`` and
``caps`` (what its tier models can do: a 135M model follows no output format, the mock calls
tools by rule, Qwen2.5 for real):

* the client's system prompt decides the output format;
* earlier turns are used (the history component of the tokens, and the answer where the model
  can read it);
* ``max_tokens`` and ``stop`` cut the answer where they say;
* a two-step tool loop (call -> the client runs the tool -> final answer) completes;
* the Responses API answers (``responses.create``, streamed too);
* ``store: false`` stores nothing; ``memroute/<tier>`` pins a tier;
* an escalated streamed answer delivers its first token before the answer is complete.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import httpx
import openai
import pytest

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
WEATHER_REPORT = "sunny, 21 degrees Celsius"
NO_MEMORY = {"memroute": {"store": False, "use_memory": False}}


@dataclass(frozen=True)
class Caps:
    tiers: tuple[str, ...]  # the cascade's tier names, cheapest first
    admin_key: str
    follows_format: bool  # the tiers follow a system prompt's output format
    reads_history: bool  # the tiers answer from an earlier turn's fact
    calls_tools: bool  # the tiers call an offered tool for an obvious question
    timeout_s: float = 120.0


class DropInClientSuite:
    url: str
    key: str
    caps: Caps

    # -- helpers ----------------------------------------------------------------------------

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key,
                             timeout=self.caps.timeout_s, max_retries=0)

    def user(self) -> str:
        return f"dropin-{uuid.uuid4().hex[:10]}"

    def stored(self, user: str) -> int:
        admin = {"Authorization": f"Bearer {self.caps.admin_key}"}
        assert httpx.post(f"{self.url}/admin/drain", headers=admin,
                          timeout=self.caps.timeout_s).json()["drained"]
        tenant = self.tenant
        body = httpx.get(f"{self.url}/admin/memories", params={"tenant": tenant, "user": user},
                         headers=admin, timeout=self.caps.timeout_s).json()
        return body["count"] + body["pending"]

    @property
    def tenant(self) -> str:
        return self.tenant_of_key

    tenant_of_key: str = "acme"

    # -- the suite --------------------------------------------------------------------------

    def test_the_system_prompt_decides_the_output_format(self):
        if not self.caps.follows_format:
            pytest.skip("these tier models follow no output format (the mock; SmolLM2-135M: 0 of 8 "
                        "tried); Qwen2.5 does: test_drop_in_qwen.py")
        r = self.client().chat.completions.create(
            model="memroute", user=self.user(), extra_body=NO_MEMORY,
            messages=[{"role": "system", "content": 'Reply only with JSON of the form {"answer": "..."}.'},
                      {"role": "user", "content": "What is the capital of France?"}])
        assert "answer" in json.loads(r.choices[0].message.content)

    def test_earlier_turns_reach_the_model(self):
        r = self.client().chat.completions.create(
            model="memroute", user=self.user(), extra_body=NO_MEMORY,
            messages=[{"role": "user", "content": "My name is Zoltan."},
                      {"role": "assistant", "content": "Nice to meet you, Zoltan."},
                      {"role": "user", "content": "What is my name?"}])
        report = r.model_extra["memroute"]
        assert report["tokens"]["history"] > 0
        if self.caps.reads_history:
            assert "Zoltan" in r.choices[0].message.content

    def test_max_tokens_and_stop_cut_the_answer(self):
        c = self.client()
        ask = dict(model=f"memroute/{self.caps.tiers[0]}", user=self.user(), extra_body=NO_MEMORY,
                   messages=[{"role": "user", "content": "Describe a cat in two sentences."}])
        full = c.chat.completions.create(**ask)
        words = full.choices[0].message.content.split()
        assert len(words) >= 3, full.choices[0].message.content
        short = c.chat.completions.create(**ask, max_tokens=2)
        assert short.choices[0].finish_reason == "length"
        assert short.model_extra["memroute"]["calls"][-1]["tokens"]["output"] <= 2
        stop = words[2]  # greedy decoding: the same answer, cut before its third word
        cut = c.chat.completions.create(**ask, stop=[stop])
        text = cut.choices[0].message.content
        assert stop not in text and full.choices[0].message.content.startswith(text.strip())

    def test_a_two_step_tool_loop_completes(self):
        if not self.caps.calls_tools:
            pytest.skip("these tier models call no tools (SmolLM2-135M); the mock and Qwen2.5 do")
        c, user = self.client(), self.user()
        messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
        # room for the call's JSON (an agent with tools sets max_tokens for it)
        first = c.chat.completions.create(model="memroute", user=user, messages=messages,
                                          tools=[WEATHER_TOOL], max_tokens=128)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments), dict)
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": WEATHER_REPORT}]
        final = c.chat.completions.create(model="memroute", user=user, messages=messages,
                                          tools=[WEATHER_TOOL], max_tokens=128)
        assert final.choices[0].finish_reason in ("stop", "length")
        assert final.choices[0].message.content and not final.choices[0].message.tool_calls
        assert self.stored(user) == 1  # the question with its final answer; not the call

    def test_the_responses_api_answers(self):
        c = self.client()
        r = c.responses.create(model="memroute", input="What is 2 + 2?", user=self.user(),
                               instructions="Answer briefly.", max_output_tokens=16,
                               extra_body=NO_MEMORY)
        assert r.status in ("completed", "incomplete") and r.output_text.strip()
        assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
        deltas, final = [], None
        with c.responses.stream(model="memroute", input="Name a colour.", user=self.user(),
                                max_output_tokens=8, extra_body=NO_MEMORY) as stream:
            for e in stream:
                if e.type == "response.output_text.delta":
                    deltas.append(e.delta)
                elif e.type in ("response.completed", "response.incomplete"):  # 8 tokens may cut it
                    final = e.response
        assert final is not None and "".join(deltas) == final.output_text and final.output_text.strip()

    def test_store_false_remembers_nothing(self):
        user = self.user()
        self.client().chat.completions.create(
            model="memroute", user=user, messages=[{"role": "user", "content": "My cat is Tom."}],
            extra_body={"memroute": {"store": False}})
        assert self.stored(user) == 0

    def test_a_tier_is_pinned_by_its_model_name(self):
        top = len(self.caps.tiers) - 1
        r = self.client().chat.completions.create(
            model=f"memroute/{self.caps.tiers[top]}", user=self.user(), extra_body=NO_MEMORY,
            messages=[{"role": "user", "content": "Say hello."}])
        report = r.model_extra["memroute"]
        assert report["tier"] == top and len(report["calls"]) == 1 and not report["escalated"]

    def test_an_escalated_stream_sends_its_first_token_before_the_answer_is_complete(self):
        started = time.perf_counter()
        arrivals, report = [], None
        stream = self.client().chat.completions.create(
            model="memroute", user=self.user(), stream=True, max_tokens=24,
            messages=[{"role": "user", "content": "Tell me about the sea."}],
            # tau 1: no probe answer is confident enough, so the cascade escalates
            extra_body={"memroute": {"store": False, "use_memory": False, "tau": 1.0}})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.perf_counter() - started)
            report = (chunk.model_extra or {}).get("memroute") or report
        done = time.perf_counter() - started
        assert report is not None and report["escalated"], report
        assert len(arrivals) >= 3
        # the first token came while the answering tier was still generating
        assert arrivals[0] < done - 0.25 * (done - report["latency_ms"][0] / 1000.0), (arrivals, done)
