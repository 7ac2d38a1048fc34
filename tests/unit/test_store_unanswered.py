"""A Milvus server that does not answer in time is BackendUnavailable (the Router then answers
the whole batch without memory at once, instead of bisecting it against the timeout)."""

from __future__ import annotations

import grpc
import pytest

from memroute.errors import BackendUnavailable
from memroute.memory.milvus_rows import reloading


class RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def raising(code):
    def call():
        raise RpcError(code)
    return call


@pytest.mark.parametrize("code", [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE])
def test_an_unanswered_read_is_unavailable(code):
    with pytest.raises(BackendUnavailable) as e:
        reloading(None, "c", raising(code))
    assert e.value.status == 503 and code.name in e.value.message


def test_other_rpc_errors_pass_through():
    with pytest.raises(RpcError):
        reloading(None, "c", raising(grpc.StatusCode.INVALID_ARGUMENT))


def test_after_an_unanswered_read_the_next_ones_fail_at_once_for_a_while(monkeypatch):
    import memroute.memory.milvus_rows as rows

    now = [100.0]
    monkeypatch.setattr(rows.time, "monotonic", lambda: now[0])
    breaker, calls = rows.ReadBreaker(pause_s=3.0), []

    def hangs():
        calls.append(1)
        raise RpcError(grpc.StatusCode.DEADLINE_EXCEEDED)

    with pytest.raises(BackendUnavailable):
        reloading(None, "c", hangs, breaker)
    with pytest.raises(BackendUnavailable, match="not asked again"):
        reloading(None, "c", hangs, breaker)
    assert len(calls) == 1  # the second read never reached the server
    now[0] += 3.1
    assert reloading(None, "c", lambda: "rows", breaker) == "rows"  # asked again after the pause
