"""The chat that asks the small model for an extraction, and the retry after a refused output.

The system instructions follow the
:class:`~memroute.memory.facts.extraction_schema.ExtractionSchema` (its keys, open keys, whether
units are asked for); the conversation is numbered from 0 with each turn's session date. Kept
apart from the schema and the parser: this is the text the model reads, not the shape it must
answer with.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from memroute.memory.facts.extraction_schema import MAX_UNIT_CHARS, MAX_UNITS, ExtractionSchema
from memroute.types import Message, TurnPair, format_session_date

ASSISTANT_CHARS = 300  # assistant replies are clipped in the prompt: facts are the user's


def _iso(epoch_s: int | float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).date().isoformat()


def system_prompt(schema: ExtractionSchema) -> str:
    described = '"description": ..., ' if schema.open_keys else ""
    lines = [
        "You extract facts about the user from a conversation, for a personal assistant's "
        "memory. Answer with one JSON object and nothing else:",
        f'{{"facts": [{{{described}"key": ..., "value": ..., "source": ..., "valid_from": ..., '
        '"turn": ...}]' + (',\n "units": [{"text": ..., "turn": ...}]}' if schema.units else "}"),
        "",
        ("Known keys (use one when the fact is exactly what it says; skip keys the conversation "
         "does not mention):" if schema.open_keys else
         "The keys you may use (one fact per key and value; skip keys the conversation does "
         "not mention):"),
    ]
    lines += [f"- {f.name}: {f.description}" if f.description else f"- {f.name}"
              for f in schema.fields]
    lines += ["", "Rules:"]
    lines += [
        '- "description": what the fact is, without its value ("the name of the user\'s pet '
        'rabbit", "the caterer the user chose for the wedding").',
        '- "key": a known key when the fact is exactly that one; otherwise a new short key of '
        'lowercase words joined by "_" and ".", general to specific ("pet.rabbit.name", '
        '"event.caterer", "building.gate_code"). Different things get different keys: a '
        "pet's name is not user.name, and two pets are two keys.",
    ] if schema.open_keys else ['- "key": one of the keys above, exactly as written.']
    lines += [
        '- "value": the value in a few words, as the user gave it (a number stays a number: '
        '"80", not "eighty dollars a month" unless they said so).',
        '- "source": "explicit" when the user said it themselves; "inferred" when you '
        "concluded it from what they said.",
        '- "valid_from": the day it became true as "YYYY-MM-DD" when the conversation says '
        "when (\"since March 2021\": \"2021-03-01\"), else null.",
        '- "turn": the number of the turn the fact comes from.',
        "- When the user corrects or changes a value, give each value with its own turn; the "
        "later one replaces the earlier.",
        "- Only facts about the user (not the assistant's suggestions or general knowledge).",
    ]
    if not schema.units:
        return "\n".join([*lines, '- Nothing to extract: {"facts": []}.'])
    lines += [
        "",
        '"units": what the user said that is worth remembering, each as one short sentence that '
        "stands alone, read months later without the conversation:",
        "- Say who (the user's name if known, else \"The user\"), what, and when: the date of "
        "the turn it comes from, written out (\"On 8 May 2023\").",
        "- No pronouns (he, she, it, they, this, that): name the person or thing.",
        "- No relative dates (yesterday, last week, next month, tomorrow): turn them into "
        "dates from the turn's date.",
        f"- At most {MAX_UNITS} units, each under {MAX_UNIT_CHARS} characters; "
        '"turn": the number of the turn it comes from.',
        '- Nothing to extract: {"facts": [], "units": []}.',
    ]
    return "\n".join(lines)


def conversation_text(turns: Sequence[TurnPair], *, assistant_chars: int = ASSISTANT_CHARS) -> str:
    """The turns, numbered from 0, each with its session date; assistant replies clipped."""
    out = []
    for i, t in enumerate(turns):
        reply = t.assistant_text.strip()
        if len(reply) > assistant_chars:
            reply = reply[:assistant_chars].rstrip() + " ..."
        out.append(f"Turn {i} ({format_session_date(t.session_time)}, "
                   f"{_iso(t.session_time)})\nUser: {t.user_text.strip()}\nAssistant: {reply}")
    return "\n\n".join(out)


def extraction_prompt(
    schema: ExtractionSchema, turns: Sequence[TurnPair], *, assistant_chars: int = ASSISTANT_CHARS
) -> list[Message]:
    """The system instructions and the conversation, as the chat the model answers."""
    conversation = conversation_text(turns, assistant_chars=assistant_chars)
    return [
        Message("system", system_prompt(schema)),
        Message("user", f"Conversation:\n\n{conversation}\n\nExtract the facts about the user "
                        + ("and the units " if schema.units else "") + "as the JSON object."),
    ]


def retry_prompt(messages: Sequence[Message], output: str, error: str) -> list[Message]:
    """``messages`` plus the refused output and why, asking once more (the retry)."""
    return [*messages, Message("assistant", output[:2000]),
            Message("user", f"That output was invalid: {error[:300]}. Answer again with only "
                            "the JSON object, following the rules.")]


__all__ = ["conversation_text", "extraction_prompt", "retry_prompt", "system_prompt"]
