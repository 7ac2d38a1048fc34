"""Full-context prompts: sessions in order with dates, oldest-first trimming to the model's window,
one history (one token prefix) for all of a conversation's questions."""

from pathlib import Path

import pytest

from memroute.accounting.cost import Pricing
from memroute.datasets.records import HistorySession, HistoryTurn
from memroute.errors import ConfigError
from memroute.eval.full_context import (
    HISTORY_HEADER,
    answer_full_context,
    fit_history,
    full_context_messages,
    render_history,
    trim_history,
)
from memroute.routing.confidence import CONFIDENCE

from .fakes import FakeBackend, words

SYSTEM = "You are a helpful assistant."


def sessions(n_sessions=3, turns=4):
    return [
        HistorySession(
            f"Session {s}", f"{s}:00 pm on {s} May, 2023",
            tuple(HistoryTurn(f"{'Ann' if t % 2 == 0 else 'Bob'}: s{s} turn {t} says something", f"D{s}:{t}")
                  for t in range(1, turns + 1)),
        )
        for s in range(1, n_sessions + 1)
    ]


def test_render_keeps_session_order_dates_and_speakers():
    text = render_history(sessions(2, 2))
    assert text.splitlines() == [
        HISTORY_HEADER,
        "", "[Session 1, 1:00 pm on 1 May, 2023]", "Bob: s1 turn 1 says something", "Ann: s1 turn 2 says something",
        "", "[Session 2, 2:00 pm on 2 May, 2023]", "Bob: s2 turn 1 says something", "Ann: s2 turn 2 says something",
    ]


def test_everything_fits_untrimmed():
    h = trim_history(sessions(), 10_000, words)
    assert not h.truncated and h.kept_turns == h.total_turns == 12
    assert h.tokens == words(h.text) and h.keys[0] == "D1:1" and h.keys[-1] == "D3:4"
    assert "left out" not in h.text


def test_trimming_drops_the_oldest_turns_first_and_says_so():
    full = trim_history(sessions(), 10_000, words)
    h = trim_history(sessions(), full.tokens - 20, words)
    assert h.truncated and h.tokens <= full.tokens - 20
    # a suffix of the conversation: the newest turn is kept, the oldest ones went
    assert h.keys == full.keys[-h.kept_turns:]
    assert f"({12 - h.kept_turns} earlier turns are left out" in h.text
    # the partly kept session keeps its header; the dropped session's header is gone
    first_kept = h.keys[0].split(":")[0][1:]
    assert f"[Session {first_kept}," in h.text
    assert "[Session 1," not in h.text or first_kept == "1"


def _suffix_tokens(convo, kept):
    """Tokens of the history holding the newest ``kept`` turns, rendered by hand."""
    flat = [(s, t) for s in convo for t in s.turns]
    chosen = flat[len(flat) - kept:]
    parts = [HistorySession(s.label, s.date_text, tuple(t for s2, t in chosen if s2 is s)) for s in convo]
    parts = [p for p in parts if p.turns]
    return words(render_history(parts, omitted=len(flat) - kept))


@pytest.mark.parametrize("budget", [10, 17, 23, 31, 40, 57, 80, 110])
def test_trimmed_history_is_the_longest_suffix_that_fits(budget):
    convo = sessions()
    h = trim_history(convo, budget, words)
    assert h.tokens <= budget
    best = max(k for k in range(13) if k == 0 or _suffix_tokens(convo, k) <= budget)
    assert h.kept_turns == best


def test_nothing_fits_gives_no_history():
    h = trim_history(sessions(), 3, words)
    assert h.text == "" and h.kept_turns == 0 and h.total_turns == 12 and h.keys == ()


def test_fit_history_leaves_room_for_every_question_and_the_answer():
    backend = FakeBackend("large")
    questions = ["When?", "What did Ann say about the long and winding question here?"]
    window, max_tokens = 90, 8
    h = fit_history(sessions(), SYSTEM, questions, context_tokens=window, max_tokens=max_tokens,
                    count_tokens=backend.count_tokens, count_text_tokens=backend.count_text_tokens)
    assert h.truncated and h.kept_turns > 0
    for q in questions:
        assert backend.count_tokens(full_context_messages(SYSTEM, h.text, q)) + max_tokens <= window


def test_fit_history_refuses_a_window_without_room():
    backend = FakeBackend("large")
    with pytest.raises(ConfigError, match="max_model_len 10") as err:
        fit_history(sessions(), SYSTEM, ["When?"], context_tokens=10, max_tokens=8,
                    count_tokens=backend.count_tokens, count_text_tokens=backend.count_text_tokens)
    assert err.value.field == "model.max_model_len"


def test_prompts_of_one_conversation_share_the_history_prefix():
    h = trim_history(sessions(), 10_000, words)
    a = full_context_messages(SYSTEM, h.text, "When did Ann go?")
    b = full_context_messages(SYSTEM, h.text, "Who is Bob?")
    assert a[0] == b[0] and a[0].role == "system" and h.text in a[0].content
    assert [m.role for m in a] == ["system", "user"] and a[1].content == "When did Ann go?"


def _smol_tokenizer():
    folder = Path.home() / ".cache" / "memroute" / "converted" / "smollm2-135m"
    if not (folder / "tokenizer_config.json").is_file():
        pytest.skip("the smollm2-135m asset is not converted on this machine")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def test_real_chat_template_token_prefix_covers_the_whole_history():
    from memroute.llm.chat import chat_prompt_ids, text_token_count

    tok = _smol_tokenizer()
    h = trim_history(sessions(5, 6), 10_000, lambda t: text_token_count(tok, t))
    a = chat_prompt_ids(tok, full_context_messages(SYSTEM, h.text, "When did Ann go?"))
    b = chat_prompt_ids(tok, full_context_messages(SYSTEM, h.text, "Who is Bob?"))
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    # everything up to the question is shared: the engine's prefix cache can serve it
    assert common >= h.tokens and common >= len(a) - 12


def test_answer_full_context_batches_in_order_and_accounts_the_history_as_base():
    class Recording(FakeBackend):
        def __init__(self):
            super().__init__("large", answer="in May", logprob=-0.3)
            self.batches = []

        def generate_many(self, batch, **kw):
            self.batches.append(len(batch))
            return super().generate_many(batch, **kw)

    backend = Recording()
    h = trim_history(sessions(), 10_000, words)
    questions = [f"question {i}?" for i in range(6)]
    prompts = [full_context_messages(SYSTEM, h.text, q) for q in questions]
    results = answer_full_context(
        backend, Pricing(1.5), prompts, max_tokens=8, batch_size=4,
        confidence=CONFIDENCE.get("mean_logprob"), l_min=-3.0,
    )
    assert backend.batches == [4, 2] and [p[1].content for p in backend.prompts] == questions
    assert [r.answer for r in results] == ["in May"] * 6
    call = results[0].calls[0]
    assert call.base_prompt_tokens == backend.count_tokens(prompts[0]) and call.injected_tokens == 0
    assert call.accepted and call.confidence == pytest.approx(0.9)
    assert results[0].decision.memories == [] and not results[0].decision.escalated
    assert results[0].eff_cost == pytest.approx(Pricing(1.5).eff_cost(call.base_prompt_tokens, 2))
