"""Effective cost and dollar cost of model calls.

EffCost (paper, Sec. IV-E): ``(input + 4 * output) * P / 8`` with P the parameters in
billions; the 4x reflects that each output token is a memory-bound decode pass. Input tokens a
prefix cache served may be priced at a discount (``cached_input_discount``, as production price
lists do: cached input at 10-50 % of the price); at the default 0 every input token counts whole.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTPUT_WEIGHT = 4.0


def billed_input(input_tokens: float, cached_tokens: float, cached_discount: float) -> float:
    """Input tokens as priced: each cached one at ``1 - cached_discount`` of a token."""
    return input_tokens - cached_discount * cached_tokens


def eff_cost(input_tokens: int, output_tokens: int, params_b: float, *,
             cached_tokens: int = 0, cached_discount: float = 0.0) -> float:
    """``cached_tokens`` of ``input_tokens`` cost ``1 - cached_discount`` of a token each."""
    if input_tokens < 0 or output_tokens < 0 or cached_tokens < 0:
        raise ValueError("token counts must be >= 0")
    if cached_tokens > input_tokens:
        raise ValueError(f"{cached_tokens} cached tokens of {input_tokens} input tokens")
    if not 0.0 <= cached_discount <= 1.0:
        raise ValueError(f"cached_discount must be in [0, 1], got {cached_discount!r}")
    billed = billed_input(input_tokens, cached_tokens, cached_discount)
    return (billed + OUTPUT_WEIGHT * output_tokens) * params_b / 8.0


@dataclass(frozen=True)
class Pricing:
    """How a tier's measured tokens are priced.

    ``params_b`` is the P of EffCost: the model's own size, or ``price_as_params_b`` to price
    the CPU stand-in's real token counts as the production model it stands in for.
    ``cached_input_discount``: the share of an input token's price a prefix-cache hit saves.
    """

    params_b: float
    usd_per_m_input: float = 0.0
    usd_per_m_output: float = 0.0
    cached_input_discount: float = 0.0

    def eff_cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        return eff_cost(input_tokens, output_tokens, self.params_b, cached_tokens=cached_tokens,
                        cached_discount=self.cached_input_discount)

    def usd(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        billed = billed_input(input_tokens, cached_tokens, self.cached_input_discount)
        return (billed * self.usd_per_m_input + output_tokens * self.usd_per_m_output) / 1e6
