import math

import pytest

from memroute.accounting.cost import Pricing, eff_cost
from memroute.errors import ConfigError
from memroute.routing.confidence import confidence, normalize
from memroute.types import ModelReply


def reply(logprobs, alts=None):
    return ModelReply("x", "m", logprobs, 1, len(logprobs), alt_logprobs=alts)


@pytest.mark.parametrize(
    "mean, expected",
    [(0.0, 1.0), (-1.5, 0.5), (-3.0, 0.0), (-4.5, 0.0), (-0.3, 0.9), (0.2, 1.0)],
)
def test_eq1_maps_mean_logprob(mean, expected):
    assert normalize(mean, -3.0) == pytest.approx(expected)


def test_mean_logprob_confidence_uses_mean_over_tokens():
    # mean of (-0.5, -2.5) = -1.5 -> c = 0.5, the paper's tau=0.5 boundary
    assert confidence(reply([-0.5, -2.5])) == pytest.approx(0.5)
    # a different floor changes the sensitivity range
    assert confidence(reply([-1.0]), l_min=-2.0) == pytest.approx(0.5)


def test_min_token_is_stricter_than_mean():
    r = reply([-0.01, -0.01, -2.7])
    assert confidence(r, "min_token") == pytest.approx(0.1)
    assert confidence(r, "mean_logprob") > confidence(r, "min_token")


def test_top2_margin():
    # margins 3.0 and 0.0 -> mean 1.5 nats -> 1.5/3 = 0.5
    r = reply([-0.1, -0.7], alts=[-3.1, -0.7])
    assert confidence(r, "top2_margin") == pytest.approx(0.5)
    assert confidence(reply([-0.1]), "top2_margin") == 0.0  # no alternatives reported


def test_empty_generation_has_zero_confidence():
    assert confidence(reply([])) == 0.0


def test_unknown_confidence_lists_available():
    with pytest.raises(ConfigError) as e:
        confidence(reply([-1.0]), "entropy")
    assert "mean_logprob" in str(e.value) and "top2_margin" in str(e.value)
    assert e.value.field == "router.confidence"


def test_eff_cost_formula():
    # (in + 4*out) * P/8: 100 in, 10 out at 8B -> 140; the 235B model costs 235/8 times more
    assert eff_cost(100, 10, 8) == pytest.approx(140.0)
    assert eff_cost(100, 10, 235) / eff_cost(100, 10, 8) == pytest.approx(235 / 8)
    with pytest.raises(ValueError):
        eff_cost(-1, 0, 8)


def test_pricing_usd():
    p = Pricing(params_b=0.5, usd_per_m_input=0.15, usd_per_m_output=0.60)
    assert p.usd(1_000_000, 500_000) == pytest.approx(0.45)
    assert math.isclose(p.eff_cost(8, 0), 0.5)
