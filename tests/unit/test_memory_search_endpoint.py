"""POST /v1/memory/search behind the API (the serving core's MemoryApi, and the ingress route
itself on a hand-made request): the caller's tenant names the namespace, facts / units / turns
come back in one ranking with a confidence, a just-appended turn is found before it is stored,
units written by the extraction lane are searchable, erasure removes them, and a bad body is an
OpenAI-shaped 400 naming the field."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re

import numpy as np
import pytest

from memroute.config.extraction import ExtractionConfig
from memroute.config.schema import ModelConfig
from memroute.errors import InvalidRequest
from memroute.namespace import namespace
from memroute.serving.fact_requests import search_request
from memroute.types import memory_of

from .fakes import call_like_ingress, serving_core
from .test_units import FakeUnitStore

SMALL = ModelConfig(name="mock-small", engine="mock", params_b=0.5)
ALICE, BOB = namespace("acme", "alice"), namespace("globex", "alice")
DOG = "On 8 May 2023 Alice adopted a golden retriever named Biscuit."
EXTRACTED = json.dumps({
    "facts": [{"key": "user.pet", "value": "a dog named Biscuit", "source": "explicit",
               "valid_from": None, "turn": 0}],
    "units": [{"text": DOG, "turn": 0}, {"text": DOG.replace("named", "called"), "turn": 0}],
}).replace("{", "{{").replace("}", "}}")
EXTRACTING = ModelConfig(name="mock-small", engine="mock", params_b=0.5, engine_args={
    "answer": "Noted.", "rules": [{"match": "^Conversation:", "answer": EXTRACTED}]})


class WordEncoder:
    """Bag-of-words vectors (hashed): texts sharing words are near; the same words, identical."""

    name, dim = "words", 64

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower().replace("called", "named")):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


class UnitStore(FakeUnitStore):
    dim = 64

    def list_user(self, user_id):
        return [m for m, _ in self.rows.values() if m.user_id == user_id]


def core_with_units(tmp_path, monkeypatch, model=SMALL, **overrides):
    """The fakes' serving core with a unit index (real UnitIndex and HybridRetriever over an
    in-memory store) in its memory parts, as build.memory gives it with ``units=``."""
    from memroute import build
    from memroute.config.schema import RetrievalConfig
    from memroute.memory.units import UnitIndex
    from memroute.retrieval.retriever import HybridRetriever

    enc, store = WordEncoder(), UnitStore()
    index = UnitIndex(enc, store, retriever=HybridRetriever(enc, store, RetrievalConfig()))
    real = build.MemoryParts

    def parts(encoder, st, retriever, units=None):
        return real(encoder, st, retriever, index)

    monkeypatch.setattr(build, "MemoryParts", parts)
    core = serving_core(tmp_path, monkeypatch, model, api_keys={"sk-a": "acme", "sk-g": "globex"},
                        **overrides)
    return stored_as_memories(core), index


def stored_as_memories(core):
    """The fakes' store lists TurnPairs; Milvus lists Memory rows (what the fallback reads)."""
    fake_list = core.store.list_user
    core.store.list_user = lambda uid: [memory_of(p) for p in fake_list(uid)]
    core.memory_api.corpus = core.store.list_user  # the fallback's corpus (no BM25 cache here)
    return core


@pytest.fixture
def core(tmp_path, monkeypatch):
    c = serving_core(tmp_path, monkeypatch, SMALL, api_keys={"sk-a": "acme", "sk-g": "globex"})
    yield stored_as_memories(c)
    c.close()


def search(core, user, body):
    return core.memory_api.search_memory(user, body)


def test_facts_and_turns_in_one_ranking_with_a_confidence(core):
    core.assert_fact(ALICE, {"key": "user.pet", "value": "a dog named Biscuit"})
    core.append_turns(ALICE, {"turns": [
        {"user": "My dog Biscuit loves the beach.", "assistant": "Lovely!", "time": 1_700_000_000},
        {"user": "I bought a new kettle.", "assistant": "Nice.", "time": 1_700_000_100}]})
    core.drain()
    out = search(core, ALICE, {"query": "dog Biscuit", "top_k": 5})
    assert out["object"] == "memory.search" and out["confidence"] in ("medium", "high")
    kinds = [r["kind"] for r in out["results"]]
    assert kinds[:2] == ["fact", "turn"] and "kettle" not in json.dumps(out["results"])
    assert out["results"][0]["score"] >= out["results"][1]["score"] > 0
    assert search(core, BOB, {"query": "dog Biscuit"})["results"] == []  # another tenant's alice


def test_a_just_appended_turn_is_found_before_it_is_stored(core):
    core.flusher.stop(drain=False)  # the journal alone holds it
    core.append_turns(ALICE, {"turns": [{"user": "The gate code is 4471.", "assistant": "Noted."}]})
    out = search(core, ALICE, {"query": "gate code"})
    assert any("4471" in r["text"] for r in out["results"])


def test_a_weak_answer_adds_the_keyword_fallback_below_it(core):
    core.append_turns(ALICE, {"turns": [
        {"user": "The gatehouse opens at nine.", "assistant": "Good to know.",
         "time": 1_700_000_000}]})
    core.drain()
    out = search(core, ALICE, {"query": "gate"})  # "gate" is no word of the turn: no real match
    assert out["fallback"] is True and out["confidence"] == "low"
    [hit] = out["results"]
    assert hit["fallback"] is True and 0 < hit["score"] < core.cfg.search.fallback_below


@pytest.mark.parametrize("body, field", [
    ([], "body"), ({}, "query"), ({"query": ""}, "query"), ({"query": 5}, "query"),
    ({"query": "x" * 2001}, "query"), ({"query": "q", "top_k": 0}, "top_k"),
    ({"query": "q", "top_k": 21}, "top_k"), ({"query": "q", "top_k": "3"}, "top_k"),
    ({"query": "q", "limit": 3}, "limit"),
])
def test_a_bad_search_body_names_the_field(body, field):
    with pytest.raises(InvalidRequest) as e:
        search_request(body, max_chars=2000)
    assert e.value.field == field


def test_units_from_the_extraction_lane_are_searched_deduped_and_erased(tmp_path, monkeypatch):
    core, index = core_with_units(
        tmp_path, monkeypatch, EXTRACTING,
        extraction=ExtractionConfig(threshold_tokens=5, max_tokens=512))
    try:
        body = {"model": "memroute", "user": "alice",
                "messages": [{"role": "user", "content": "I adopted a dog, Biscuit, today."}]}
        assert call_like_ingress(core, body).status == 200
        core.drain()
        for _ in range(200):  # the lane's own thread
            if core.extraction.stats()["runs"]:
                break
            asyncio.run(asyncio.sleep(0.02))
        stats = core.extraction.stats()
        assert (stats["units_written"], stats["units_suppressed"]) == (1, 1)  # "called" = "named"
        out = search(core, ALICE, {"query": "golden retriever Biscuit", "top_k": 3})
        assert out["results"][0]["kind"] == "unit" and out["results"][0]["text"] == DOG
        assert out["results"][0]["turn_id"]
        report = core.erase_user(ALICE, actor="test")
        assert report.unit_rows == 1 and index.store.rows == {}
        after = search(core, ALICE, {"query": "Biscuit"})["results"]
        assert all(r["kind"] != "unit" for r in after)
    finally:
        core.close()


# -- the ingress route ----------------------------------------------------------------------


def ingress_call(core, body, *, key="sk-a", query=""):
    """``RouterIngress.search_memory`` on a hand-made request (no Ray Serve, no HTTP server)."""
    from starlette.requests import Request

    from serve.ingress import RouterIngress

    ingress = object.__new__(RouterIngress.func_or_class)
    ingress.core, ingress.cfg = core, core.cfg
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/memory/search",
             "query_string": query.encode(), "headers": [
                 (b"authorization", f"Bearer {key}".encode()),
                 (b"content-type", b"application/json"),
                 (b"content-length", str(len(raw)).encode())]}

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    try:
        resp = asyncio.run(ingress.search_memory(Request(scope, receive)))
    finally:
        del ingress.core  # the test's fixture closes the core, not the ingress' __del__
    return resp.status_code, json.loads(resp.body)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_route_answers_for_the_callers_tenant_and_400s_naming_the_field(core):
    core.assert_fact(ALICE, {"key": "user.pet", "value": "a dog named Biscuit"})
    status, out = ingress_call(core, {"user": "alice", "query": "Biscuit the dog"})
    assert status == 200 and out["object"] == "memory.search"
    top = out["results"][0]
    assert top["kind"] == "fact" and top["value"] == "a dog named Biscuit"
    status, out = ingress_call(core, {"query": "Biscuit the dog"}, query="user=alice")
    assert status == 200 and out["results"]  # ?user= works as on the other memory routes
    status, out = ingress_call(core, {"user": "alice", "query": "Biscuit"}, key="sk-g")
    assert status == 200 and out["results"] == []  # globex's alice has no facts
    status, out = ingress_call(core, {"user": "alice", "query": "q", "top_k": 50})
    assert status == 400 and out["error"]["param"] == "top_k"
    status, out = ingress_call(core, {"user": "alice", "query": "q"}, key="sk-nope")
    assert status == 401
