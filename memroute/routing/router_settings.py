"""The Router's settings, checked once when it is built: each bad value is a ConfigError (or,
for the per-request-shaped ones, an InvalidRequest) naming its field, before any request."""

from __future__ import annotations

from memroute.config import RetrievalConfig, RouterConfig
from memroute.errors import ConfigError, InvalidRequest
from memroute.retrieval.followup import FOLLOWUP_MODES
from memroute.routing.calibrator import Calibrator
from memroute.routing.calibrator import load as load_calibrator
from memroute.routing.decoding import check_probe_decoding
from memroute.routing.grounding import GROUNDING_MODES
from memroute.routing.tier_memories import MEMORY_SCOPES, REPEATS, STATEMENT_SCOPES


def check_router_settings(cfg: RouterConfig, retrieval: RetrievalConfig) -> None:
    if not 0.0 <= cfg.tau <= 1.0:
        raise InvalidRequest(f"router.tau must be in [0, 1], got {cfg.tau}", field="router.tau")
    check_probe_decoding(cfg.probe_decoding)
    if cfg.grounding not in GROUNDING_MODES:
        bare = cfg.grounding == "False"  # YAML's bare off
        yaml = ' (in YAML a bare off is the boolean false: write "off")' * bare
        raise ConfigError(f"router.grounding must be one of {', '.join(GROUNDING_MODES)}, got "
                          f"{cfg.grounding!r}{yaml}", field="router.grounding")
    if not 0.0 <= cfg.grounding_share <= 1.0:
        raise ConfigError(f"router.grounding_share must be in [0, 1], got "
                          f"{cfg.grounding_share}", field="router.grounding_share")
    for name in ("escalation_memories", "first_tier_memories"):
        if getattr(cfg, name) not in MEMORY_SCOPES:
            raise ConfigError(f"router.{name} must be one of {', '.join(MEMORY_SCOPES)}, "
                              f"got {getattr(cfg, name)!r}", field=f"router.{name}")
    if cfg.statement_memories not in STATEMENT_SCOPES:
        raise ConfigError(f"router.statement_memories must be one of "
                          f"{', '.join(STATEMENT_SCOPES)}, got {cfg.statement_memories!r}",
                          field="router.statement_memories")
    if cfg.repeats not in REPEATS:
        raise ConfigError(f"router.repeats must be one of {', '.join(REPEATS)}, got "
                          f"{cfg.repeats!r}", field="router.repeats")
    if retrieval.followup not in FOLLOWUP_MODES:
        raise ConfigError(f"retrieval.followup must be one of {', '.join(FOLLOWUP_MODES)}, got "
                          f"{retrieval.followup!r}", field="retrieval.followup")


def calibrator_for(cfg: RouterConfig, calibrator: Calibrator | None
                   ) -> tuple[Calibrator | None, float]:
    """The calibrator the router decides by (``calibrator``, else the artifact
    ``router.calibrator`` names, else none) and the threshold its scores are compared with
    (``router.tau`` without one)."""
    if calibrator is None and cfg.calibrator:
        calibrator = load_calibrator(cfg.calibrator)
    if calibrator is None:
        return None, cfg.tau
    # A threshold picked with grounding's refusals applied keeps more wrong answers without
    # them, or with laxer ones. (The other way round is only stricter than the report: allowed.)
    fitted = calibrator.meta.get("grounding")
    stricter = GROUNDING_MODES.index  # the modes are listed from the laxest
    if fitted in GROUNDING_MODES and stricter(cfg.grounding) < stricter(fitted):
        raise ConfigError(f"router.calibrator was fitted for router.grounding={fitted!r}, but "
                          f"router.grounding is {cfg.grounding!r}: set it to match, or refit "
                          f"with python -m jobs.calibrate grounding={cfg.grounding}",
                          field="router.calibrator")
    threshold = (calibrator.threshold if cfg.calibrator_threshold is None
                 else cfg.calibrator_threshold)
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"router.calibrator_threshold must be in [0, 1], got {threshold}",
                          field="router.calibrator_threshold")
    return calibrator, threshold
