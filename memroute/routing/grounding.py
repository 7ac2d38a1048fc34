"""Whether a cheap tier's answer was read from what it was given (``router.grounding``).

The replay's shadow logs show why log-prob confidence cannot be the only gate: the 0.5B answers a
personal question with the date label of the memory it was shown ("1 March 2024" for an
appointment stated as "8 May 2024"), and a general question ("5 % of 840?") with a confident
"420". Both are accepted at tau 0.5, and the wrong answer is then stored and copied by every
later repeat -- by the large tier too, which reads the same memory.

The rule here asks where the answer's words come from. A lower tier's answer to a question is
accepted only when one trusted source holds every number of the answer and at least ``share`` of
its words. Trusted sources:

- the user's own turn of each injected memory;
- the assistant turn of a memory that a *stronger* tier (or no tier: an ingested history)
  produced. A tier's own past answers, and those of tiers cheaper than it, are not evidence:
  they are what a wrong answer would have left;
- the facts block and the client's own turns (history, tool results).

Not the memory's date label, and not the question itself: an echo of the question's numbers is
not an answer. An answer with no kept word ("Yes.") is not judged here. Pure string work: a
few microseconds per answer, no model call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from memroute.memory.supersession import split_memory_text
from memroute.text.tokenize import unigrams
from memroute.types import Message, RetrievalHit

GROUNDING_MODES = ("off", "memory")


def sources(hits: Sequence[RetrievalHit], untrusted_models: Collection[str],
            extra: Iterable[str] = ()) -> list[str]:
    """The texts an answer may be read from: each memory's user turn, its assistant turn unless
    one of ``untrusted_models`` wrote it, then ``extra`` (facts block, client turns)."""
    out: list[str] = []
    for h in hits:
        question, answer = split_memory_text(h.memory.text)
        out.append(question)
        if answer and h.memory.source_model not in untrusted_models:
            out.append(answer)
    out.extend(t for t in extra if t)
    return out


def client_texts(history: Sequence[Message], tail: Sequence[Message]) -> list[str]:
    """What the client itself sent besides the question: its earlier turns and tool results."""
    return [m.content for m in (*history, *tail) if m.content]


def grounded(answer: str, texts: Sequence[str], share: float) -> bool | None:
    """True when one of ``texts`` holds every number-bearing word of ``answer`` and at least
    ``share`` of its kept words; None when the answer has no kept word (nothing to check)."""
    words = set(unigrams(answer))
    if not words:
        return None
    numbers = {w for w in words if any(c.isdigit() for c in w)}
    need = share * len(words)
    for text in texts:
        have = words & set(unigrams(text))
        if numbers <= have and len(have) >= need:
            return True
    return False
