"""The Router's settings (``router.*``): the escalation rule, the calibrator and the memory block's
layout; re-exported by :mod:`memroute.config.schema` with the other parts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class RouterConfig:
    tau: float = 0.5
    confidence: str = "mean_logprob"  # mean_logprob | min_token | top2_margin
    l_min: float = -3.0
    use_memory: bool = True
    use_routing: bool = True  # False: the first tier answers everything
    max_tokens: int = 32  # a request's max_tokens overrides it
    store_answers: bool = True  # cross-model memory: store every answered turn-pair
    # greedy: a tier that may still escalate decodes greedily (tau is calibrated on greedy
    # answers); client: with the client's temperature/top_p/seed (memroute/routing/decoding.py)
    probe_decoding: str = "greedy"
    # A fitted calibrator artifact (JSON from `python -m jobs.calibrate`; memroute/routing/
    # calibrator.py): when set, a tier's answer is accepted iff its P(correct) from the answer's
    # features reaches the artifact's threshold (calibrator_threshold overrides it; a request's
    # tau too), instead of `confidence` >= tau. None: the confidence/tau rule.
    calibrator: Optional[str] = None
    calibrator_threshold: Optional[float] = None
    # With a calibrator: a turn that asks nothing (memroute/text/turn_kind.py) is judged by
    # `confidence` >= this instead (the calibrator learnt from questions only). None (default):
    # by the calibrator too. Off by default: on a first replay slice it cut escalation but the
    # small model's acknowledgements then entered memory and F1 fell (docs/BENCHMARKS.md).
    statement_tau: Optional[float] = None
    # A lower tier's answer to a question is accepted only when it was read from what that tier
    # was given (memroute/routing/grounding.py): "closest" (default: of the memories' turns only
    # those sharing the most subject words with the question count), "memory" (any sharing one)
    # or "off" (confidence alone).
    # grounding_share: the share of the answer's words one trusted source must hold (all of its
    # numbers always). Applies to members that use memory.
    grounding: str = "closest"
    grounding_share: float = 0.5
    # An answer that copies a memory line ("[1 March 2024] Q: My gate code is UB-3795.") is
    # read as what the line says ("UB-3795") before it is judged (memroute/routing/echo.py):
    # unread, the gate escalated every such copy. Off: the copy is judged, and returned, as is.
    read_echoes: bool = True
    # Whether an escalation's memory block shows the replies cheaper tiers stored. Off: only the
    # user's turns and the replies of this tier or stronger ones, so a small model's wrong answer
    # ("How much is the emergency fund target? / A: RS-7316", a gate code) is not copied by the
    # tier asked because the small one was unsure (seed 18; docs/BENCHMARKS.md).
    cheaper_replies: bool = False
    # Which retrieved memories an escalation reads: "subject" (default): those sharing a subject
    # word with the question (memroute/routing/grounding.py::on_subject), or "all". A general
    # question ("What is 76 squared?") escalated with five unrelated memories: "subject" cost
    # 0.76-0.79x at -0.7 to -1.7 F1 on three replay traces (docs/BENCHMARKS.md).
    escalation_memories: str = "subject"
    # The same choice for the first tier: "subject" (default) or "all". The 0.5B answered "What
    # is my rabbit's name?" with the hamster's name, both among its five memories. With
    # grounding "closest": -8 % and -2 % EffCost@prod at +1.9 and +0.2 F1 on two fresh traces
    # (docs/BENCHMARKS.md, stop 44).
    first_tier_memories: str = "subject"
    # What a turn that only states reads ("We switched our caterer to Brightwater."; not a task,
    # memroute/text/turn_kind.py): "none" (default), "subject" or "all". Shown memories, the
    # 0.5B's acknowledgement was a copy of one of them, 190 injected tokens a statement
    # (memroute/routing/tier_memories.py; docs/BENCHMARKS.md, stop 48).
    statement_memories: str = "none"
    # A question the user asked again, stored with the same answer each time: "collapse" keeps
    # one copy among a request's memories (the most trusted; memroute/routing/repeats.py) and
    # fills the freed places from further down the ranking; "escalation" does so only for the
    # tiers above the first; "keep" injects every copy (memroute/routing/tier_memories.py).
    repeats: str = "keep"
    # A question whose top_k memories hold no statement of the user's on its subject gets the
    # best-ranked one among the further candidates in place of its last memory: on the
    # 2,000-request trace, copies of the question itself ("Sorry, I forgot: which city does my
    # brother live in? / A: Valencia") filled the top five, so the small tier's right answer
    # had no trusted source and was escalated, and the large tier, which does not see the small
    # one's replies, read nothing and invented one (memroute/routing/tier_memories.py).
    statement_slot: bool = True
    # Time in the memory block (memroute.routing.prompt.MemoryLayout; ablation in BENCHMARKS):
    # each memory's date, oldest first (or by relevance), today's date, "the newest wins".
    # memory_dates: auto | all | relative | none; auto drops the labels a question asking a
    # stated date or time would copy (memroute/routing/memory_view.py); true/false = all/none.
    memory_dates: str = "auto"
    memory_order: str = "chronological"  # chronological | relevance | newest_first
    current_date: bool = True
    latest_wins: bool = True
    # Where the retrieved memories go (prefix caching, memroute.routing.prompt):
    # "system": appended to the system message (before the client's history);
    # "before_question": a system message right before the question, so the system prompt, the
    # facts block and the history are a prefix the engine's cache reuses across a user's turns.
    memory_position: str = "system"
    # Short answers and absolute dates: on LoCoMo (50 q, Qwen 0.5B, warm) this prompt gave F1 28.3
    # against 12.6 for "answer in a few words" (full sentences and "last Saturday" cost token F1).
    # No example words (stop 47): shown no date, the 0.5B answered "On what day is my sister's
    # birthday?" with "Last year", copied from "words like yesterday or last year".
    system_prompt: str = (
        "You are a helpful personal assistant with memories of earlier conversations. "
        "Answer with only the short answer (a name, date, number or short phrase), not a full "
        "sentence. Give dates as absolute dates, working out a relative time from the date of "
        "the memory that says it."
    )
    # The system prompt of a turn that only states ("We switched our caterer to Brightwater.";
    # memroute/text/turn_kind.py) when the client sends none; empty: system_prompt. Told to
    # give "a name, date, number or short phrase" with no memory, the 0.5B acknowledged
    # statements with an invented name ("John", "Ford") at low confidence, and 16 of seed 31's
    # 134 escalated; told to "acknowledge it in a few words", it replied "Acknowledge it."
    # (docs/BENCHMARKS.md, stop 48). The reply is not shown in later prompts (memory_view).
    statement_prompt: str = (
        "You are a helpful personal assistant with memories of earlier conversations. The user "
        'is telling you something to remember: reply with a short confirmation, such as "Noted."'
    )
