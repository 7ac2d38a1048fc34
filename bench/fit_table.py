"""The fit table of docs/SCALING_FIT.md: each GPU preset's tiers through the accelerator fit
check (memroute/config/accelerator_fit.py), as Hydra composes them.

    .venv/bin/python bench/fit_table.py                       # every preset
    .venv/bin/python bench/fit_table.py gpu accelerator.memory_gb=141
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from memroute.config.accelerator_fit import fit_report
from memroute.config.compose import compose_serve_config
from memroute.config.serve import served_tiers

# The rows of docs/SCALING_FIT.md: each preset, and the production pair on the smaller devices.
TABLE_CASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpu", ()),
    ("gpu-h200", ()),
    ("gpu-a100-80g", ()),
    ("gpu", ("accelerator.name=H200", "accelerator.memory_gb=141")),
    ("gpu", ("accelerator.name=A100-80G", "accelerator.memory_gb=80")),
)


def markdown_table(cases: Sequence[tuple[str, Sequence[str]]] = TABLE_CASES) -> str:
    """One row per checked tier of each composed preset (Hydra is imported here only)."""
    header = ("| preset | device | tier | context | weights GB | KV KiB/token | KV GB/seq | need GB "
              "| budget GB | sequences | fits |")
    rows = [header, "|" + "---|" * 11]
    for preset, overrides in cases:
        cfg = compose_serve_config(preset, list(overrides))
        acc = cfg.accelerator
        label = " ".join([preset, *(o for o in overrides if o.startswith("accelerator.memory_gb"))])
        for f in fit_report(acc, served_tiers(cfg)):
            rows.append(
                f"| {label} | {acc.name} {acc.memory_gb:g} GB | {f.index} {f.model} | {f.max_model_len} "
                f"| {f.weights_gb:.1f} | {f.kv_bytes_per_token / 1024:g} | {f.kv_gb_per_sequence:.2f} "
                f"| {f.need_gb:.1f} | {f.utilization:g} x {acc.memory_gb:g} = {f.budget_gb:.1f} "
                f"| {f.sequences} | {'yes' if f.fits else 'no'} |"
            )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``python bench/fit_table.py [PRESET [OVERRIDE ...]]``: the fit table."""
    args = list(sys.argv[1:] if argv is None else argv)
    print(markdown_table([(args[0], args[1:])] if args else TABLE_CASES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
