"""Judging one tier's reply: accept it, or escalate its member to the next tier.

A reply is accepted on the last tier, or when its confidence reaches the threshold and, where
grounding is on, it was read from a trusted source (:mod:`memroute.routing.grounding`). The
confidence is the configured log-prob statistic (:mod:`memroute.routing.confidence`), or with a
calibrator P(correct) from the answer's features (:mod:`memroute.routing.confidence_features`).
Every call, accepted or not, leaves its :class:`~memroute.types.CallRecord` on its member, so the
cost of a rejected probe is counted.
"""

from __future__ import annotations

from collections.abc import Sequence

from memroute.config import RouterConfig
from memroute.routing.calibrator import Calibrator
from memroute.routing.confidence import ConfidenceFn
from memroute.routing.confidence_features import features as answer_features
from memroute.routing.grounding import grounded, sources
from memroute.routing.members import Pending, Prompt
from memroute.routing.request import Tier
from memroute.text.turn_kind import asks_something
from memroute.types import CallRecord, ModelReply, RouteDecision, RouteResult


class Judge:
    def __init__(self, cfg: RouterConfig, confidence_fn: ConfidenceFn,
                 calibrator: Calibrator | None, threshold: float,
                 untrusted: Sequence[frozenset[str]]) -> None:
        """``untrusted[t]``: the models whose stored answers are no evidence for tier ``t``'s
        answer (itself and the cheaper tiers)."""
        self.cfg = cfg
        self.confidence_fn = confidence_fn
        self.calibrator = calibrator
        self.threshold = threshold
        self.untrusted = list(untrusted)

    def __call__(
        self, t: int, tier: Tier, last: bool, tau: float | None, p: Pending, prompt: Prompt,
        reply: ModelReply,
    ) -> RouteResult | None:
        """Record the call on ``p``; its result when accepted, None to escalate."""
        backend = tier.backend
        if self.calibrator is None or self._statement(p.query):
            c = self.confidence_fn(reply, self.cfg.l_min)
            if self.calibrator is not None:
                tau = self.cfg.statement_tau if tau is None else tau
        else:  # P(correct) from the answer's features (memroute.routing.confidence_features)
            c = self.calibrator.predict(answer_features(reply, prompt.memories, p.query))
        g = self.grounded(t, prompt, reply, p.query)
        accepted = last or (c >= (self.threshold if tau is None else tau) and g is not False)
        p.confidences.append(c)
        p.calls.append(
            CallRecord(
                tier=t,
                model_id=backend.model_id,
                base_prompt_tokens=prompt.base_tokens,
                injected_tokens=reply.prompt_tokens - prompt.base_tokens - prompt.history_tokens,
                history_tokens=prompt.history_tokens,
                output_tokens=reply.completion_tokens,
                eff_cost=tier.pricing.eff_cost(reply.prompt_tokens, reply.completion_tokens,
                                               reply.cached_tokens),
                latency_s=reply.latency_s,
                confidence=c,
                accepted=accepted,
                params_b=tier.pricing.params_b,
                cached_tokens=reply.cached_tokens,
                ttft_s=reply.ttft_s,
                grounded=g,
                answer=reply.text,
            )
        )
        if not accepted:
            p.rejected = (t, backend.model_id, prompt, reply)
            return None
        return result(reply, decision(t, backend.model_id, p, prompt), p, prompt)

    def grounded(self, t: int, prompt: Prompt, reply: ModelReply, query: str) -> bool | None:
        """Whether tier ``t``'s answer was read from a trusted source; None: not checked."""
        if prompt.evidence is None:
            return None
        texts = sources(prompt.memories, self.untrusted[t], prompt.evidence, query,
                        closest=self.cfg.grounding == "closest")
        return grounded(reply.text, texts, self.cfg.grounding_share, query)

    def _statement(self, query: str) -> bool:
        """A turn the calibrator does not judge: it asks nothing (``router.statement_tau``)."""
        return self.cfg.statement_tau is not None and not asks_something(query)


def fallback(p: Pending) -> RouteResult:
    """The best answer there is when the tiers above failed: the latest rejected one."""
    assert p.rejected is not None
    t, model_id, prompt, reply = p.rejected
    for call in p.calls:
        call.accepted = call.tier == t
    return result(reply, decision(t, model_id, p, prompt), p, prompt)


def decision(t: int, model_id: str, p: Pending, prompt: Prompt) -> RouteDecision:
    return RouteDecision(
        answered_tier=t,
        answered_model=model_id,
        confidences=list(p.confidences),
        escalated=t > 0 and not p.pinned,
        memories=prompt.memories,
        memory_degraded=p.memory_degraded,
        tiers_skipped=list(p.skipped),
    )


def result(reply: ModelReply, decision: RouteDecision, p: Pending, prompt: Prompt) -> RouteResult:
    return RouteResult(reply.text.strip(), decision, p.calls, reply=reply,
                       messages=prompt.messages, decoding=prompt.decoding.report())
