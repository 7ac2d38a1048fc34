"""Run evaluation conditions over a conversational QA set and summarize them.

Pure library code: the job in ``jobs/benchmark.py`` builds the parts from config and calls
:func:`run_conditions`; tests call it with small real parts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from memroute.config import RetrievalConfig, RouterConfig
from memroute.datasets.conversations import as_eval_conversation
from memroute.datasets.records import Conversation, EvalConversation
from memroute.errors import ConfigError
from memroute.eval.conditions import CONDITIONS, Condition
from memroute.eval.fact_layer import asked_at
from memroute.eval.full_context import (
    History,
    answer_full_context,
    fit_history,
    full_context_messages,
)
from memroute.eval.metrics import bleu1, f1
from memroute.llm.base import Backend
from memroute.memory.summary import SummaryMemory
from memroute.memory.summary.memory import is_summary
from memroute.retrieval.with_units import is_unit, source_turn_id
from memroute.routing.confidence import CONFIDENCE
from memroute.routing.facts_block import FactsSource, injected_facts
from memroute.routing.prompt import render_memory_block
from memroute.routing.router import MemoryRetriever, Router, RouteRequest, Tier
from memroute.types import ModelReply


class TimedBackend:
    """Wraps a back end and accumulates the wall time spent generating.

    Lets the benchmark report the router's own overhead (retrieval, token counting,
    prompt building, memory writes) as a share of request time.
    """

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.generate_s = 0.0

    def generate(self, messages, **kw) -> ModelReply:  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return self.inner.generate(messages, **kw)
        finally:
            self.generate_s += time.perf_counter() - t

    def generate_many(self, batch, **kw) -> list[ModelReply]:  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        try:
            return self.inner.generate_many(batch, **kw)
        finally:
            self.generate_s += time.perf_counter() - t

    def count_tokens(self, messages) -> int:  # type: ignore[no-untyped-def]
        return self.inner.count_tokens(messages)

    def count_text_tokens(self, text: str) -> int:
        return self.inner.count_text_tokens(text)

    def close(self) -> None:
        self.inner.close()


@dataclass
class ConditionTiming:
    condition: str
    wall_s: float
    generate_s: float

    @property
    def overhead_share(self) -> float:
        return max(0.0, self.wall_s - self.generate_s) / self.wall_s if self.wall_s else 0.0


def ingest(
    conversations: Sequence[Conversation | EvalConversation], retriever: MemoryRetriever
) -> dict[int, tuple[str, ...]]:
    """Store every conversation's turn-pairs (user = sample id); returns memory id -> evidence
    keys (LoCoMo dia_ids)."""
    dia: dict[int, tuple[str, ...]] = {}
    for conv in map(as_eval_conversation, conversations):
        retriever.remember([r.pair for r in conv.records])
        dia.update({r.pair.id: r.dia_ids for r in conv.records})
    return dia


def run_conditions(
    conversations: Sequence[Conversation | EvalConversation],
    tiers: Sequence[Tier],
    retriever: MemoryRetriever,
    router_cfg: RouterConfig,
    retrieval_cfg: RetrievalConfig,
    conditions: Sequence[str],
    *,
    memory_dia_ids: dict[int, tuple[str, ...]],
    batch_size: int = 16,
    progress: bool = True,
    context_tokens: Sequence[int] | None = None,
    facts: FactsSource | None = None,
    units_retriever: MemoryRetriever | None = None,
    summary_memory: SummaryMemory | None = None,
) -> tuple[list[dict[str, Any]], list[ConditionTiming]]:
    """Answer every question under every condition; one prediction row per (condition, question).

    ``context_tokens[i]`` is tier i's context window (``max_model_len``); full-context conditions
    need it to fit the history. ``facts``: the users' extracted facts (the fact layer's store,
    :mod:`memroute.eval.fact_layer`), which the ``*_facts`` conditions inject; they are read as
    of each user's last turn-pair. ``units_retriever``: the turn-pairs and the atomic units
    together (:class:`~memroute.retrieval.with_units.WithUnits`), for the ``*_units`` conditions.
    ``summary_memory``: the users' compacted summary trees (already built over the same
    conversations), for the ``*_summary`` conditions; a summary counts as the turns it covers.
    """
    from tqdm.auto import tqdm

    convs = [as_eval_conversation(c) for c in conversations]
    questions = [(conv, qa) for conv in convs for qa in conv.qa]
    small_model = tiers[0].backend.model_id
    rows: list[dict[str, Any]] = []
    timings: list[ConditionTiming] = []
    for name in conditions:
        cond = CONDITIONS.get(name, field="conditions")
        if cond.facts and facts is None:
            raise ConfigError(f"condition {name!r} needs the fact layer's store (facts=...)",
                              field="conditions")
        if cond.units and units_retriever is None:
            raise ConfigError(f"condition {name!r} needs the atomic units (units_retriever=...)",
                              field="conditions")
        if cond.summary and summary_memory is None:
            raise ConfigError(f"condition {name!r} needs the summary trees (summary_memory=...)",
                              field="conditions")
        dia = summary_dia(summary_memory, memory_dia_ids) if cond.summary else memory_dia_ids
        timed = [TimedBackend(tiers[i].backend) for i in cond.tier_indexes(len(tiers))]
        cond_tiers = [
            Tier(tiers[i].name, tb, tiers[i].pricing)  # type: ignore[arg-type]
            for i, tb in zip(cond.tier_indexes(len(tiers)), timed)
        ]
        start = time.perf_counter()
        bar = tqdm(total=len(questions), desc=name, disable=not progress, unit="q")
        if cond.full_context:
            rows += _run_full_context(
                name, cond, convs, cond_tiers[0], router_cfg, context_tokens, len(tiers),
                batch_size=batch_size, small_model=small_model, dia=memory_dia_ids, bar=bar,
            )
        else:
            # Evaluation measures a fixed memory: answers are not written back here.
            cfg = replace(router_cfg, use_memory=cond.use_memory, use_routing=cond.use_routing, store_answers=False)
            if cond.summary or cond.units:
                # The view is what these conditions study, and a summary or a unit words its
                # turns its own way: the first tier reads all of it, whatever the subject filter.
                cfg = replace(cfg, first_tier_memories="all")
            memory = (units_retriever if cond.units else summary_memory if cond.summary
                      else retriever)
            router = Router(cond_tiers, cfg, retrieval_cfg, memory if cond.use_memory else None,
                            facts=facts if cond.facts else None)
            for lo in range(0, len(questions), batch_size):
                chunk = questions[lo : lo + batch_size]
                # the facts as of the end of the conversation (the time is read by nothing else)
                reqs = [RouteRequest(conv.sample_id, qa.question,
                                     session_time=asked_at(conv) if cond.facts else None)
                        for conv, qa in chunk]
                for (conv, qa), res in zip(chunk, router.route_many(reqs)):
                    rows.append(_row(name, conv, qa, res, small_model, dia))
                bar.update(len(chunk))
        bar.close()
        timings.append(
            ConditionTiming(name, time.perf_counter() - start, sum(t.generate_s for t in timed))
        )
    return rows, timings


def summary_dia(memory: SummaryMemory | None, dia: dict[int, tuple[str, ...]]
                ) -> dict[int, tuple[str, ...]]:
    """``dia`` with every summary node's evidence keys: those of the turn-pairs it covers."""
    out = dict(dia)
    for tree in (memory.trees.values() if memory else ()):
        for node in tree.nodes.values():
            out[node.id] = tuple(sorted({d for p in node.covers for d in dia.get(p, ())}))
    return out


def _run_full_context(
    name: str,
    cond: Condition,
    convs: Sequence[EvalConversation],
    tier: Tier,
    router_cfg: RouterConfig,
    context_tokens: Sequence[int] | None,
    n_tiers: int,
    *,
    batch_size: int,
    small_model: str,
    dia: dict[int, tuple[str, ...]],
    bar: Any,
) -> list[dict[str, Any]]:
    """Conversation by conversation, so its questions run back to back on one cached prefix."""
    index = cond.tier_indexes(n_tiers)[0]
    if context_tokens is None or len(context_tokens) != n_tiers:
        raise ConfigError(
            f"condition {name!r} needs the context window (max_model_len) of every tier",
            field="conditions",
        )
    confidence = CONFIDENCE.get(router_cfg.confidence, field="router.confidence")
    backend = tier.backend
    asked: list[tuple[EvalConversation, Any, History]] = []
    prompts = []
    for conv in convs:  # conversation order: its questions run back to back on one cached prefix
        if not conv.qa:
            continue
        questions = [qa.question for qa in conv.qa]
        history = fit_history(
            conv.history, router_cfg.system_prompt, questions, context_tokens=context_tokens[index],
            max_tokens=router_cfg.max_tokens, count_tokens=backend.count_tokens,
            count_text_tokens=backend.count_text_tokens,
        )
        for qa in conv.qa:
            asked.append((conv, qa, history))
            prompts.append(full_context_messages(router_cfg.system_prompt, history.text, qa.question))
    rows: list[dict[str, Any]] = []
    step = max(1, batch_size)
    for lo in range(0, len(prompts), step):
        results = answer_full_context(
            backend, tier.pricing, prompts[lo : lo + step], max_tokens=router_cfg.max_tokens,
            batch_size=step, confidence=confidence, l_min=router_cfg.l_min,
        )
        for (conv, qa, history), res in zip(asked[lo : lo + step], results):
            rows.append(_row(name, conv, qa, res, small_model, dia, history=history))
        bar.update(len(results))
    return rows


def _row(
    cond: str, conv: EvalConversation, qa: Any, res: Any, small_model: str, dia: dict[int, tuple[str, ...]],
    *, history: History | None = None,
) -> dict[str, Any]:
    """One prediction row. Besides the scores it keeps every input of the failure causes and of the
    rescore job (evidence, what was in the prompt, the stale value), so those need no model later.

    ``injected_dia_ids``: evidence keys of the memories injected into the answering call, or with
    a full-context ``history`` the keys of every turn in the prompt."""
    memories = res.decision.memories  # injected into the answering call's prompt
    # an atomic unit counts as the turn it came from
    injected_dia = sorted({d for h in memories for d in dia.get(source_turn_id(h.memory), ())})
    if history is not None:
        injected_dia = sorted(set(history.keys))
    evidence = set(qa.evidence)
    summaries = [h.memory for h in memories if is_summary(h.memory)]
    summary_dia_ids = {d for m in summaries for d in dia.get(m.id, ())}
    verbatim_dia_ids = set(injected_dia) - summary_dia_ids
    facts_text = injected_facts(res.messages[0].content) if res.messages else ""
    return {
        "condition": cond,
        "sample_id": conv.sample_id,
        "qid": qa.qid,
        "category": qa.category,
        "fact_type": qa.fact_type or f"cat{qa.category}",
        "question": qa.question,
        "reference": qa.answer,
        "stale_answer": qa.stale_answer,
        "prediction": res.answer,
        "f1": f1(res.answer, qa.answer, category=qa.category),
        "bleu1": bleu1(res.answer, qa.answer),
        "answered_tier": res.decision.answered_tier,
        "answered_model": res.decision.answered_model,
        "on_small": res.decision.answered_model == small_model,
        "escalated": res.decision.escalated,
        "confidences": res.decision.confidences,
        "memories": len(memories),
        "evidence": list(qa.evidence),
        "injected_dia_ids": injected_dia,
        "memory_ids": [h.memory.id for h in memories],
        "units_injected": sum(is_unit(h.memory) for h in memories),
        # UTF-8 bytes of the memory block (header + lines) in the answering prompt
        "memory_bytes": len(render_memory_block(memories).encode()) if memories else 0,
        "evidence_injected": bool(evidence & set(injected_dia)) if evidence else None,
        # summary-tree conditions: the evidence reached the prompt only inside summaries (null
        # elsewhere), and those summaries' text (the compacted_away cause reads both)
        "evidence_compacted": (bool(evidence & summary_dia_ids) and not evidence & verbatim_dia_ids)
        if evidence and summaries else None,
        "compacted_text": "\n".join(m.text for m in summaries),
        # the facts block of the answering prompt ("" without the fact layer)
        "facts_block": facts_text,
        "facts_injected": sum(line.startswith("- ") for line in facts_text.splitlines()),
        "input_tokens": sum(c.input_tokens for c in res.calls),
        "base_tokens": sum(c.base_prompt_tokens for c in res.calls),
        "injected_tokens": sum(c.injected_tokens for c in res.calls),
        "output_tokens": sum(c.output_tokens for c in res.calls),
        "eff_cost": res.eff_cost,
        # full-context conditions: the history given (0 elsewhere)
        "history_tokens": history.tokens if history else 0,
        "history_turns": history.kept_turns if history else 0,
        "history_turns_total": history.total_turns if history else 0,
        "calls": [
            {"tier": c.tier, "model": c.model_id, "in": c.input_tokens, "base": c.base_prompt_tokens,
             "injected": c.injected_tokens, "out": c.output_tokens, "confidence": c.confidence,
             "accepted": c.accepted, "latency_s": c.latency_s, "params_b": c.params_b,
             "eff_cost": c.eff_cost}
            for c in res.calls
        ],
    }
