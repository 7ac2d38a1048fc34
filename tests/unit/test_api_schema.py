"""OpenAI chat body validation: every refusal names the field and carries the right status."""

from __future__ import annotations

import pytest

from memroute.config.api import ApiConfig, ApiLimits, check_api_config
from memroute.api.responses import error_body
from memroute.api.schema import check_body_size, parse_chat_request
from memroute.errors import ConfigError, InvalidRequest, NotFound, PayloadTooLarge
from memroute.types import Message

LIMITS = ApiLimits(max_input_chars=100, max_tokens=64, max_messages=4, max_user_chars=20)
MODELS = ["memroute"]


def body(**over):
    b = {"model": "memroute", "messages": [{"role": "user", "content": "what is my dog called?"}]}
    b.update(over)
    return {k: v for k, v in b.items() if v is not _DROP}


_DROP = object()


def parse(b, **kw):
    kw.setdefault("limits", LIMITS)
    kw.setdefault("models", MODELS)
    return parse_chat_request(b, **kw)


def test_minimal_request_gets_defaults():
    req = parse(body(), default_user="anon")
    assert req.model == "memroute"
    assert req.messages == [Message("user", "what is my dog called?")]
    assert req.query == "what is my dog called?"
    assert (req.user, req.user_given) == ("anon", False)
    assert req.max_tokens is None and req.temperature is None
    assert req.stream is False and req.include_usage is False
    assert req.input_chars == len("what is my dog called?")


def test_full_request_and_unknown_fields_ignored():
    req = parse(
        body(
            messages=[
                {"role": "system", "content": "be brief", "name": "sys"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": [{"type": "text", "text": "my dog?"},
                                             {"type": "text", "text": "his name?"}]},
            ],
            max_tokens=16, temperature=0, user="alice", stream=True,
            stream_options={"include_usage": True}, top_p=0.9, seed=3, whatever={"x": 1}, n=1,
        )
    )
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "user"]
    assert req.query == "my dog?\nhis name?"  # text parts joined by newlines
    assert (req.max_tokens, req.temperature, req.user, req.user_given) == (16, 0.0, "alice", True)
    assert isinstance(req.temperature, float)
    assert req.stream and req.include_usage
    assert req.input_chars == len("be brief") + 2 + 5 + len("my dog?\nhis name?")


def test_null_optionals_mean_absent():
    nulls = dict(user=None, max_tokens=None, temperature=None, stream=None, stream_options=None)
    req = parse(body(**nulls))
    assert not req.user_given and not req.stream
    assert req.max_tokens is None and req.temperature is None


def test_max_completion_tokens_is_an_alias():
    assert parse(body(max_completion_tokens=8)).max_tokens == 8
    assert parse(body(max_completion_tokens=8, max_tokens=8)).max_tokens == 8
    with pytest.raises(InvalidRequest) as e:
        parse(body(max_completion_tokens=8, max_tokens=9))
    assert e.value.field == "max_completion_tokens"


BAD_400 = [
    # (body, field)
    ([1, 2], "body"),
    ("text", "body"),
    (body(model=_DROP), "model"),
    (body(model=None), "model"),
    (body(model=3), "model"),
    (body(model="  "), "model"),
    (body(messages=_DROP), "messages"),
    (body(messages=None), "messages"),
    (body(messages="hi"), "messages"),
    (body(messages={"role": "user"}), "messages"),
    (body(messages=[]), "messages"),
    (body(messages=["hi"]), "messages[0]"),
    (body(messages=[{"content": "hi"}]), "messages[0].role"),
    (body(messages=[{"role": "tool", "content": "hi"}]), "messages[0].tool_call_id"),
    (body(messages=[{"role": "developer", "content": "hi"}]), "messages[0].role"),
    (body(messages=[{"role": 1, "content": "hi"}]), "messages[0].role"),
    (body(messages=[{"role": "system", "content": "x"}, {"role": "user"}]), "messages[1].content"),
    (body(messages=[{"role": "user", "content": None}]), "messages[0].content"),
    (body(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (body(messages=[{"role": "user", "content": {"text": "hi"}}]), "messages[0].content"),
    (body(messages=[{"role": "user", "content": ["hi"]}]), "messages[0].content[0]"),
    (body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
     "messages[0].content[0].type"),
    (body(messages=[{"role": "user", "content": [{"type": "text"}]}]),
     "messages[0].content[0].text"),
    (body(messages=[{"role": "user", "content": [{"type": "text", "text": 3}]}]),
     "messages[0].content[0].text"),
    (body(messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]),
     "messages[1].role"),
    (body(messages=[{"role": "system", "content": "x"}]), "messages[0].role"),
    (body(messages=[{"role": "user", "content": "  \n"}]), "messages[0].content"),
    (body(messages=[{"role": "user", "content": []}]), "messages[0].content"),
    (body(max_tokens=0), "max_tokens"),
    (body(max_tokens=-5), "max_tokens"),
    (body(max_tokens="10"), "max_tokens"),
    (body(max_tokens=1.5), "max_tokens"),
    (body(max_tokens=True), "max_tokens"),
    (body(max_tokens=65), "max_tokens"),  # over the configured cap
    (body(max_completion_tokens=0), "max_completion_tokens"),
    (body(temperature=-0.1), "temperature"),
    (body(temperature=2.01), "temperature"),
    (body(temperature="0.5"), "temperature"),
    (body(temperature=True), "temperature"),
    (body(temperature=float("nan")), "temperature"),
    (body(temperature=float("inf")), "temperature"),
    (body(stream="true"), "stream"),
    (body(stream=1), "stream"),
    (body(stream_options=True), "stream_options"),
    (body(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (body(user=123), "user"),
    (body(user=""), "user"),
    (body(user="u" * 21), "user"),
    (body(n=2), "n"),
    (body(n=True), "n"),
]


@pytest.mark.parametrize("bad,field", BAD_400)
def test_bad_requests_are_400_naming_the_field(bad, field):
    with pytest.raises(InvalidRequest) as e:
        parse(bad)
    assert e.value.field == field
    assert e.value.status == 400
    status, err = error_body(e.value)
    assert status == 400
    assert err["error"]["param"] == field
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"]


def test_messages_are_named_by_their_index():
    with pytest.raises(InvalidRequest) as e:
        parse(body(messages=[{"role": "system", "content": "a"}, {"role": "user", "content": 7},
                             {"role": "user", "content": "b"}]))
    assert e.value.field == "messages[1].content"
    assert "messages[1].content" in e.value.message and "number" in e.value.message


def test_unknown_model_is_404():
    with pytest.raises(NotFound) as e:
        parse(body(model="gpt-4o"))
    assert e.value.field == "model" and e.value.status == 404
    assert "gpt-4o" in e.value.message and "memroute" in e.value.message
    status, err = error_body(e.value)
    assert status == 404 and err["error"]["code"] == "model_not_found"
    # Without a served list any name is accepted.
    assert parse(body(model="gpt-4o"), models=None).model == "gpt-4o"


def test_oversized_input_is_413():
    at_limit = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 60}]
    assert parse(body(messages=at_limit)).input_chars == 100
    over = [{"role": "system", "content": "s" * 40}, {"role": "user", "content": "u" * 61}]
    with pytest.raises(PayloadTooLarge) as e:
        parse(body(messages=over))
    assert e.value.status == 413 and e.value.field == "messages"
    assert "101" in e.value.message and "100" in e.value.message
    status, err = error_body(e.value)
    assert status == 413 and err["error"]["param"] == "messages"


def test_too_many_messages_is_413():
    msgs = [{"role": "user", "content": "x"}] * 5
    with pytest.raises(PayloadTooLarge) as e:
        parse(body(messages=msgs))
    assert e.value.field == "messages"
    assert len(parse(body(messages=msgs[:4])).messages) == 4


def test_body_size_check():
    check_body_size(10, ApiLimits(max_body_bytes=10))
    with pytest.raises(PayloadTooLarge) as e:
        check_body_size(11, ApiLimits(max_body_bytes=10))
    assert e.value.field == "body"


def test_default_config_limits():
    cfg = check_api_config(ApiConfig())
    assert cfg.limits.max_input_chars == 32000
    assert parse(body(max_tokens=1024), limits=cfg.limits).max_tokens == 1024


@pytest.mark.parametrize(
    "cfg,field",
    [
        (ApiConfig(limits=ApiLimits(max_input_chars=0)), "api.limits.max_input_chars"),
        (ApiConfig(limits=ApiLimits(max_tokens=True)), "api.limits.max_tokens"),
        (ApiConfig(models=[]), "api.models"),
        (ApiConfig(models=[""]), "api.models"),
        (ApiConfig(default_user="no spaces allowed"), "api.default_user"),
    ],
)
def test_bad_api_config_names_the_field(cfg, field):
    with pytest.raises(ConfigError) as e:
        check_api_config(cfg)
    assert e.value.field == field
