"""Replay of recorded traffic: strategies, the driver, scores and the amortization report."""
