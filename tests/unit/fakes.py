"""Small fakes for unit tests: a word-counting back end, an in-memory retriever and a
bag-of-words encoder."""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from memroute.types import Memory, Message, ModelReply, RetrievalHit, TurnPair


def words(text: str) -> int:
    return len(text.split())


class HashEncoder:
    """Bag of words hashed by crc32 into 256 dims: texts sharing words point alike.

    (Python's str hash is salted per process, so its collisions would change from run to run.)
    ``batches``: the size of each encode call.
    """

    name, dim = "hash", 256

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode(self, texts):
        self.batches.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, zlib.crc32(w.encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


class FakeBackend:
    """Answers with a fixed text and fixed per-token logprobs; tokens are words."""

    def __init__(self, model_id: str, answer: str = "blue", logprob: float = -0.1) -> None:
        self.model_id = model_id
        self.answer = answer
        self.logprob = logprob
        self.prompts: list[list[Message]] = []

    def count_text_tokens(self, text: str) -> int:
        return words(text)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(words(m.content) + 2 for m in messages) + 1

    def generate(self, messages, *, max_tokens=32, stop=None, temperature=0.0) -> ModelReply:
        self.prompts.append(list(messages))
        n = words(self.answer)
        return ModelReply(
            text=self.answer,
            model_id=self.model_id,
            logprobs=[self.logprob] * n,
            alt_logprobs=[self.logprob - 1.0] * n,
            prompt_tokens=self.count_tokens(messages),
            completion_tokens=n,
            latency_s=0.01,
        )

    def generate_many(self, batch, **kw) -> list[ModelReply]:
        return [self.generate(m, **kw) for m in batch]

    def close(self) -> None:
        pass


class FakeRetriever:
    """Keyword retriever over stored pairs; records what it was asked to remember."""

    def __init__(self) -> None:
        self.pairs: list[TurnPair] = []

    def remember(self, pairs: Sequence[TurnPair]) -> int:
        self.pairs.extend(pairs)
        return len(pairs)

    def forget_user(self, user_id: str) -> None:
        self.pairs = [p for p in self.pairs if p.user_id != user_id]

    def forget_tenant(self, tenant: str) -> None:
        self.pairs = [p for p in self.pairs if not p.user_id.startswith(f"{tenant}:")]

    def retrieve_many(self, user_ids, queries, *, top_k=None) -> list[list[RetrievalHit]]:
        out = []
        for uid, q in zip(user_ids, queries):
            qw = set(q.lower().split())
            hits = []
            for p in self.pairs:
                if p.user_id != uid:
                    continue
                overlap = len(qw & set(p.text().lower().split()))
                if overlap:
                    m = Memory(p.id, p.user_id, p.text(), p.session_time, p.source_model, 0.0, p.session_id, p.turn_index)
                    hits.append(RetrievalHit(m, float(overlap)))
            hits.sort(key=lambda h: -h.score)
            out.append(hits[: top_k or 5])
        return out


# ------------------------------------------------------------- ServingCore with mock tiers


class Counting:
    """A back end that counts the prompts it was asked to answer."""

    def __init__(self, inner) -> None:
        self.inner, self.prompts, self.last_batch = inner, 0, []
        self.model_id = inner.model_id

    def generate_many(self, batch, **kw):
        self.prompts += len(batch)
        self.last_batch = list(batch)
        return self.inner.generate_many(batch, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class FakeStore:
    def __init__(self, retriever) -> None:
        self.retriever = retriever

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def delete_user(self, user_id) -> int:
        n = sum(p.user_id == user_id for p in self.retriever.pairs)
        self.retriever.forget_user(user_id)
        return n

    def delete_tenant(self, tenant) -> int:
        n = sum(p.user_id.startswith(f"{tenant}:") for p in self.retriever.pairs)
        self.retriever.forget_tenant(tenant)
        return n

    def list_user(self, user_id):  # upserts by id, as Milvus does
        return list({p.id: p for p in self.retriever.pairs if p.user_id == user_id}.values())


def serving_core(tmp_path, monkeypatch, *models, api_keys, journal=None, **overrides):
    """A :class:`ServingCore` over in-process mock tiers (``models``: ModelConfig, cheapest first)
    and a fake retriever; ``test_backends`` / ``test_retriever`` expose them to the test."""
    from memroute import build
    from memroute.config.api import ApiConfig
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig, RouterConfig
    from memroute.config.serve import ServeConfig
    from memroute.serving.core import ServingCore

    retriever = FakeRetriever()
    parts = build.MemoryParts(None, FakeStore(retriever), retriever)
    monkeypatch.setattr(build, "memory", lambda *a, **k: parts)
    backends = [Counting(build.backend(m, None)) for m in models]
    cfg = ServeConfig(
        cascade={str(i): m for i, m in enumerate(models)},
        memory=MemoryConfig(uri=str(tmp_path / "milvus.db")),
        # The mock tiers answer canned text that no memory holds: the confidence rule alone
        # routes here (grounding is tested in test_grounding.py).
        router=overrides.pop("router", RouterConfig(tau=0.5, max_tokens=24, grounding="off")),
        journal=journal or JournalConfig(path=str(tmp_path / "journal.sqlite3"), interval_s=0.0),
        api=ApiConfig(api_keys=dict(api_keys)),
        **overrides,
    )
    core = ServingCore(cfg, backends)
    core.test_backends, core.test_retriever = backends, retriever
    return core


def call_like_ingress(core, payload, key=None, api_key="sk-a"):
    """What the Serve ingress does with one request, in-process: prepare, the idempotency
    lookup, the batch of one, the response or the error response."""
    prepared = None
    try:
        prepared = core.prepare(payload, f"Bearer {api_key}", key)
        replay = core.begin(prepared)
        if replay is not None:
            return replay
        result = core.route_batch([prepared])[0]
        if isinstance(result, BaseException):  # this member failed alone
            raise result
        return core.respond(prepared, result, latency_s=0.01)
    except Exception as exc:  # noqa: BLE001
        return core.error(exc, tenant=getattr(prepared, "tenant", None), prepared=prepared)


def model_calls(core) -> int:
    return sum(b.prompts for b in core.test_backends)
