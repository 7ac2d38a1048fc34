"""Filter builders: user ids are validated and values reach an expression only as safe literals."""

from __future__ import annotations

import numpy as np
import pytest

from memroute.errors import InvalidRequest
from memroute.memory import filters

PAYLOADS = [
    'x" or user_id != "',
    "a' or '1'=='1",
    'alice"',
    "alice'",
    "ali\\ce",
    "alice\nor true",
    "alice\n",
    "alice\r",
    "alice\x00",
    "alice bob",  # spaces would need quoting
    " alice",
    "-alice",  # must start with a letter or digit
    "{user_id}",
    "user_id == user_id",
    "",
    "a" * 129,
    None,
    42,
    3.5,
    True,
    ["alice"],
    {"user_id": "alice"},
    b"alice",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=repr)
def test_user_filter_refuses_bad_ids(payload):
    with pytest.raises(InvalidRequest) as err:
        filters.user_filter(payload)
    assert err.value.field == "user_id"
    assert err.value.status == 400


@pytest.mark.parametrize(
    "uid", ["user-42", "conv-26", "alice@example.com", "a", "U_1.2:3", "9" * 128]
)
def test_user_filter_accepts_normal_ids(uid):
    expr, params = filters.user_filter(uid)
    assert expr == "user_id == {user_id}"  # the value never enters the template
    assert params == {"user_id": uid}
    assert filters.render(expr, params) == f'user_id == "{uid}"'


def test_users_filter_validates_every_id_and_dedupes():
    expr, params = filters.users_filter(["b", "a", "b"])
    assert (expr, params) == ("user_id in {user_ids}", {"user_ids": ["a", "b"]})
    assert filters.render(expr, params) == 'user_id in ["a", "b"]'
    with pytest.raises(InvalidRequest):
        filters.users_filter(["ok", 'x" or user_id != "'])
    with pytest.raises(InvalidRequest):
        filters.users_filter("alice")  # a bare string is not a list of ids
    with pytest.raises(InvalidRequest):
        filters.users_filter([])


def test_ids_filter_keeps_the_user_clause():
    expr, params = filters.ids_filter("alice", [3, np.int64(7)])
    assert filters.render(expr, params) == 'user_id == "alice" and id in [3, 7]'
    for bad in (["7"], [True], [1.5], [2**63], []):
        with pytest.raises(InvalidRequest):
            filters.ids_filter("alice", bad)


@pytest.mark.parametrize(
    "value", ['a"b', "a'b", "a\\b", "a\nb", "a b", "", "x" * 257, None, {"a": 1}, [["a"]], [], True,
              float("nan"), object()],
    ids=repr,
)
def test_literal_refuses_anything_that_could_change_the_expression(value):
    with pytest.raises(InvalidRequest):
        filters.literal(value, field="v")


def test_literal_encodes_numbers_strings_and_lists():
    assert filters.literal(-5) == "-5"
    assert filters.literal(np.int32(12)) == "12"
    assert filters.literal(0.25) == "0.25"
    assert filters.literal("conv-26") == '"conv-26"'
    assert filters.literal(["a", 1]) == '["a", 1]'


def test_render_requires_every_placeholder_and_every_param():
    with pytest.raises(InvalidRequest, match="missing"):
        filters.render("user_id == {uid}", {})
    with pytest.raises(InvalidRequest, match="not used"):
        filters.render("user_id == {uid}", {"uid": "a", "extra": 1})
    # Substitution is a single pass over the template: values are never re-scanned.
    assert filters.render("a == {x} and b == {y}", {"x": 1, "y": 2}) == "a == 1 and b == 2"
