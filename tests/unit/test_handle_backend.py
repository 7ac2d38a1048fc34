"""A tier seen through its Serve handle: Ray's failures become what the Router acts on."""

from __future__ import annotations

import pytest

ray_exceptions = pytest.importorskip("ray.exceptions")

from memroute.errors import BackendUnavailable, InvalidRequest  # noqa: E402
from memroute.types import Message  # noqa: E402
from serve.handle_backend import HandleBackend  # noqa: E402


class FakeHandle:
    """``handle.generate.remote(call).result(timeout_s=...)`` raising ``exc``."""

    def __init__(self, exc: BaseException) -> None:
        self.exc, self.timeouts = exc, []
        self.generate = self

    def remote(self, call):
        return self

    def result(self, timeout_s=None):
        self.timeouts.append(timeout_s)
        raise self.exc


def generate(exc: BaseException, timeout_s: float | None = 7.0):
    handle = FakeHandle(exc)
    backend = HandleBackend(handle, "tiny", timeout_s=timeout_s)
    try:
        backend.generate_many([[Message("user", "hi")]])
    except BaseException as raised:  # noqa: BLE001
        return raised, handle.timeouts
    raise AssertionError("the call did not fail")


def test_a_timed_out_or_dead_tier_is_unavailable_and_the_timeout_is_passed_on():
    for exc in (ray_exceptions.GetTimeoutError("slow"), ray_exceptions.ActorDiedError()):
        raised, timeouts = generate(exc)
        assert isinstance(raised, BackendUnavailable) and raised.status == 503, raised
        assert "tier tiny unavailable" in raised.message and timeouts == [7.0]


def test_the_replicas_own_error_comes_out_unwrapped_and_others_pass_through():
    cause = InvalidRequest("prompt too long", field="messages")
    wrapped = ray_exceptions.RayTaskError("generate", "Traceback ...", cause)
    raised, _ = generate(wrapped)
    assert raised is cause
    boom = RuntimeError("engine crashed")
    assert generate(boom)[0] is boom  # the Router's isolation decides what that means
