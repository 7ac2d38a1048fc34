"""The replay's ``memroute_facts`` strategy: what the router stores goes through the served
extraction lane (waited for per wave), and the corrected value is injected as current. On
the same trace plain memroute, which retrieves both turn-pairs, answers with the stale one."""

from __future__ import annotations

import json
import re

import pytest

from memroute.accounting.cost import Pricing
from memroute.config import RetrievalConfig, RouterConfig
from memroute.config.extraction import ExtractionConfig
from memroute.eval.replay.driver import Checkpoint, replay_strategy
from memroute.eval.replay.facts import FACTS_FILE, replay_facts
from memroute.eval.replay.outcome import TierPrice
from memroute.eval.replay.strategies import STRATEGIES, StrategyParts, needs_facts, needs_memory
from memroute.routing.router import Tier
from memroute.types import ModelReply

from .fakes import FakeBackend, FakeRetriever
from .test_replay import req

FIELDS = [{"field": "user.locker", "category": "temporal", "description": "the locker code"}]
_SAID = re.compile(r"Turn (\d+) \([^)]*\)\nUser: [^\n]*locker code is (?:now )?([A-Z]{2}-\d+)")


class Extracting(FakeBackend):
    """The extraction model: the locker code each turn states."""

    def __init__(self):
        super().__init__("extractor")
        self.calls = 0

    def generate(self, messages, *, max_tokens=32, temperature=0.0, options=None, **kw):
        self.calls += 1
        facts = [{"key": "user.locker", "value": v, "source": "explicit", "valid_from": None,
                  "turn": int(n)} for n, v in _SAID.findall(messages[1].content)]
        return ModelReply(json.dumps({"facts": facts}), self.model_id, [-0.1], prompt_tokens=10,
                          completion_tokens=1)


class Small(FakeBackend):
    """Sure of itself: the facts block's value when there is one, else the oldest code among
    the injected turn-pairs (what a model misled by the first statement says)."""

    def generate(self, messages, **kw):
        system = messages[0].content
        current = re.search(r"- user\.locker: ([A-Z]{2}-\d+) \(since", system)
        codes = re.findall(r"locker code is (?:now )?([A-Z]{2}-\d+)", system)
        self.answer = current.group(1) if current else (codes[0] if codes else "no idea")
        return super().generate(messages, **kw)


def trace():
    return [req(0, "alice", "Note this: my locker code is ZX-4471.", fact="f1"),
            req(1, "alice", "Update: my locker code is now QQ-1.", fact="f1"),
            req(2, "alice", "What is my locker code?", kind="repeat", refs=("QQ-1",),
                stale=("ZX-4471",))]


@pytest.fixture
def parts():
    tiers = [Tier("small", Small("small", logprob=-0.05), Pricing(0.5))]
    prices = [TierPrice(0.5, 8.0)]

    def make(retriever, facts=None):
        return StrategyParts(tiers, prices, RouterConfig(tau=0.5), RetrievalConfig(), retriever,
                             facts=facts)
    return make


def test_the_fact_layer_answers_the_corrected_value_plain_memory_the_stale_one(tmp_path, parts):
    assert needs_memory("memroute_facts") and needs_facts("memroute_facts")
    assert not needs_facts("memroute")
    extractor = Extracting()
    cfg = ExtractionConfig(threshold_tokens=1, fields=FIELDS)
    facts = replay_facts(cfg, extractor, tmp_path)
    turns = FakeRetriever()
    strategy = STRATEGIES.get("memroute_facts")("memroute_facts",
                                                parts(facts.feeding(turns), facts.store))
    rows = replay_strategy(strategy, trace(), Checkpoint(tmp_path / "facts.jsonl"))
    assert rows[-1]["answer"] == "QQ-1" and rows[-1]["stale"] is False
    # the turns reached the store and the lane: one run per wave, the correction supersedes
    assert len(turns.pairs) == 3 and extractor.calls >= 2
    [old, new] = facts.store.timeline("acme:alice", "user.locker")
    assert (old.value, old.status, new.value, new.status) == ("ZX-4471", "superseded", "QQ-1",
                                                              "active")
    assert facts.stats()["facts_written"] == 2
    facts.close()
    assert (tmp_path / FACTS_FILE).is_file()

    plain = STRATEGIES.get("memroute")("memroute", parts(FakeRetriever()))
    rows = replay_strategy(plain, trace(), Checkpoint(tmp_path / "plain.jsonl"))
    assert rows[-1]["answer"] == "ZX-4471" and rows[-1]["stale"] is True


def test_memroute_facts_without_the_fact_layer_is_refused(parts):
    with pytest.raises(ValueError, match="fact layer"):
        STRATEGIES.get("memroute_facts")("memroute_facts", parts(FakeRetriever()))
