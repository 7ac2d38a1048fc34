"""Effective cost and dollar cost of model calls.

EffCost (paper, Sec. IV-E): ``(input + 4 * output) * P / 8`` with P the parameters in
billions; the 4x reflects that each output token is a memory-bound decode pass.
"""

from __future__ import annotations

from dataclasses import dataclass

OUTPUT_WEIGHT = 4.0


def eff_cost(input_tokens: int, output_tokens: int, params_b: float) -> float:
    if input_tokens < 0 or output_tokens < 0:
        raise ValueError("token counts must be >= 0")
    return (input_tokens + OUTPUT_WEIGHT * output_tokens) * params_b / 8.0


@dataclass(frozen=True)
class Pricing:
    """How a tier's measured tokens are priced.

    ``params_b`` is the P of EffCost: the model's own size, or ``price_as_params_b`` to price
    the CPU stand-in's real token counts as the production model it stands in for.
    """

    params_b: float
    usd_per_m_input: float = 0.0
    usd_per_m_output: float = 0.0

    def eff_cost(self, input_tokens: int, output_tokens: int) -> float:
        return eff_cost(input_tokens, output_tokens, self.params_b)

    def usd(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.usd_per_m_input + output_tokens * self.usd_per_m_output) / 1e6
