"""Schema of the calibration job (conf/calibrate.yaml): tau from a replay's shadow samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from memroute.errors import ConfigError


@dataclass
class CalibrateConfig:
    run_id: Optional[str] = None  # a replay run folder under output_dir, replayed with shadow_share > 0
    run_dir: Optional[str] = None  # or the folder itself
    output_dir: str = ".memroute/replays"
    # The quality target: an absolute F1 (0..1), or a share of the last tier's own F1 (default 0.95),
    # or at most this share of wrong answers among those kept below the last tier (target_wrong).
    target_f1: Optional[float] = None
    target_share: Optional[float] = 0.95
    target_wrong: Optional[float] = None
    baseline_tau: float = 0.5  # what the calibrated tau is compared with on the held-out users
    # The calibrator (memroute/routing/calibrator.py), fitted when the shadow rows carry the
    # answers' features: an answer is correct when its F1 against the references reaches
    # correct_f1; l2 is the logistic regression's ridge penalty; the artifact is written to
    # calibrator_out (default: calibrator.json in the replay's run folder), for router.calibrator.
    correct_f1: float = 0.5
    # Or "value": correct when the answer holds a reference's value (the replay's value %), so
    # "Our wedding budget is $19,500." for "19,500" is right (shadow rows since 2026-12-07).
    correct: str = "f1"
    l2: float = 1.0
    calibrator_out: Optional[str] = None
    # Whether the policies are judged with router.grounding's refusals applied, as the router
    # serves with grounding on: "auto" (as the replay ran: on when its shadow rows carry
    # grounding's verdicts), "memory" or "off".
    grounding: str = "auto"
    # More replay runs (under output_dir) whose shadow samples all join the fit half: their
    # users are other people (each run's user ids are kept apart).
    fit_runs: list[str] = field(default_factory=list)
    # Who is held out: "half" of run_id's users, or "all" of them (a trace nothing was fitted
    # on; needs fit_runs).
    held_out: str = "half"


GROUNDING_CHOICES = ("auto", "memory", "off")
CORRECT_CHOICES = ("f1", "value")


def check_calibrate_config(cfg: CalibrateConfig) -> CalibrateConfig:
    if not cfg.run_id and not cfg.run_dir:
        raise ConfigError("set run_id=<replay run> (or run_dir=<folder>)", field="run_id")
    if cfg.target_f1 is not None and cfg.target_wrong is not None:
        raise ConfigError("give target_f1 or target_wrong, not both", field="target_wrong")
    if cfg.target_wrong is not None:
        if not 0.0 <= cfg.target_wrong <= 1.0:
            raise ConfigError(f"target_wrong must be in [0, 1], got {cfg.target_wrong}",
                              field="target_wrong")
        cfg.target_share = None  # replaces the default share
    elif cfg.target_f1 is not None:
        if not 0.0 <= cfg.target_f1 <= 1.0:
            raise ConfigError(f"target_f1 must be in [0, 1], got {cfg.target_f1}", field="target_f1")
        cfg.target_share = None  # an absolute target replaces the default share
    elif cfg.target_share is None or not 0.0 < cfg.target_share <= 1.5:
        raise ConfigError(f"target_share must be in (0, 1.5], got {cfg.target_share}", field="target_share")
    if not 0.0 <= cfg.baseline_tau <= 1.0:
        raise ConfigError(f"baseline_tau must be in [0, 1], got {cfg.baseline_tau}", field="baseline_tau")
    if not 0.0 < cfg.correct_f1 <= 1.0:
        raise ConfigError(f"correct_f1 must be in (0, 1], got {cfg.correct_f1}", field="correct_f1")
    if cfg.correct not in CORRECT_CHOICES:
        raise ConfigError(f"correct must be one of {', '.join(CORRECT_CHOICES)}, got "
                          f"{cfg.correct!r}", field="correct")
    if cfg.l2 < 0:
        raise ConfigError(f"l2 must be >= 0, got {cfg.l2}", field="l2")
    if cfg.held_out not in ("half", "all"):
        raise ConfigError(f"held_out must be half or all, got {cfg.held_out!r}", field="held_out")
    if cfg.held_out == "all" and not cfg.fit_runs:
        raise ConfigError("held_out=all leaves nothing to fit on: name fit_runs=[<replay run>, ...]",
                          field="held_out")
    if cfg.grounding not in GROUNDING_CHOICES:
        hint = (' (a bare YAML off is the boolean false: write "off")'
                if cfg.grounding == "False" else "")
        raise ConfigError(f"grounding must be one of {', '.join(GROUNDING_CHOICES)}, got "
                          f"{cfg.grounding!r}{hint}", field="grounding")
    return cfg
