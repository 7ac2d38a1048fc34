"""P(correct) of an answer from its features: a logistic calibrator, and its versioned artifact.

Fitted by ``python -m jobs.calibrate`` on a replay's shadow samples
(:mod:`memroute.eval.replay.calibrate`), saved as JSON, and loaded by the served app when
``router.calibrator`` names the file (:func:`memroute.build.calibrator`). The Router then
accepts a tier's answer when ``predict(features) >= threshold`` (the cost-minimising threshold
at the quality target, stored with the model; ``router.calibrator_threshold`` overrides it).

The model: features standardised by the fit set's mean and spread, then L2-regularised
logistic regression fitted by Newton steps (IRLS), in numpy. The artifact records the format,
its version and the feature names in order; :func:`load` refuses a file whose version or
features differ from this code's (:data:`VERSION`,
:data:`memroute.routing.confidence_features.FEATURES`), naming the config field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memroute.errors import ConfigError
from memroute.routing.confidence_features import FEATURES

FORMAT = "memroute.calibrator"
VERSION = 1
FIELD = "router.calibrator"


@dataclass(frozen=True)
class Calibrator:
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float = 0.5  # accept an answer when P(correct) >= this
    meta: dict[str, object] = field(default_factory=dict, compare=False)  # how it was fitted

    def __post_init__(self) -> None:
        n = len(self.features)
        if not (len(self.mean) == len(self.scale) == len(self.coef) == n):
            raise ConfigError(f"a calibrator needs mean, scale and coef for each of its {n} "
                              "features", field=FIELD)
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"calibrator threshold must be in [0, 1], got {self.threshold}",
                              field=FIELD)

    def predict(self, values: Mapping[str, float]) -> float:
        """P(correct) of one answer from its feature values (a missing feature is 0)."""
        x = np.asarray([[float(values.get(n, 0.0)) for n in self.features]], dtype=float)
        return float(self.predict_many(x)[0])

    def predict_many(self, x: np.ndarray) -> np.ndarray:
        """P(correct) per row of ``x`` (columns in the order of :attr:`features`)."""
        z = (np.asarray(x, dtype=float) - np.asarray(self.mean)) / np.asarray(self.scale)
        return _sigmoid(z @ np.asarray(self.coef) + self.intercept)

    def with_threshold(self, threshold: float) -> Calibrator:
        return Calibrator(self.features, self.mean, self.scale, self.coef, self.intercept,
                          float(threshold), dict(self.meta))

    def to_json(self) -> dict[str, object]:
        return {"format": FORMAT, "version": VERSION, "features": list(self.features),
                "mean": list(self.mean), "scale": list(self.scale), "coef": list(self.coef),
                "intercept": self.intercept, "threshold": self.threshold, "meta": self.meta}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))),
                    np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))


def fit(
    x: np.ndarray | Sequence[Sequence[float]], y: Sequence[float] | np.ndarray, *,
    names: Sequence[str] = FEATURES, l2: float = 1.0, iters: int = 50,
    meta: Mapping[str, object] | None = None,
) -> Calibrator:
    """Logistic regression of ``y`` (1 correct, 0 not) on the standardised columns of ``x``.
    ``l2``: the ridge penalty on the coefficients (not the intercept), in units of samples."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or x.shape[1] != len(names) or len(y) != x.shape[0]:
        raise ValueError(f"x must be (n, {len(names)}) and y (n,), got {x.shape} and {y.shape}")
    if len(y) == 0:
        raise ConfigError("no samples to fit a calibrator on", field="run_id")
    if l2 < 0:
        raise ConfigError(f"l2 must be >= 0, got {l2}", field="l2")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)  # a constant column: left as is (coef -> 0)
    z = np.hstack([np.ones((len(y), 1)), (x - mean) / scale])
    penalty = np.full(z.shape[1], float(l2))
    penalty[0] = 1e-9  # the intercept is (all but) free
    prior = min(max(y.mean(), 1e-3), 1 - 1e-3)
    w = np.zeros(z.shape[1])
    w[0] = math.log(prior / (1 - prior))
    for _ in range(iters):
        p = _sigmoid(z @ w)
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return Calibrator(tuple(names), tuple(map(float, mean)), tuple(map(float, scale)),
                      tuple(map(float, w[1:])), float(w[0]), 0.5,
                      {"n": int(len(y)), "positives": int(y.sum()), "l2": float(l2),
                       **dict(meta or {})})


def from_json(data: object, *, where: str = "", field: str = FIELD) -> Calibrator:
    """A calibrator from its artifact's JSON; refused (ConfigError naming ``field``) when the
    format, version or feature set is not this code's."""
    src = f" ({where})" if where else ""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ConfigError(f"{field}: not a memroute calibrator artifact{src}", field=field)
    if data.get("version") != VERSION:
        raise ConfigError(f"{field}: calibrator artifact version {data.get('version')!r}{src}, "
                          f"this memroute reads version {VERSION}: refit with python -m "
                          "jobs.calibrate", field=field)
    names = tuple(data.get("features") or ())
    if names != FEATURES:
        missing = [n for n in FEATURES if n not in names]
        extra = [n for n in names if n not in FEATURES]
        raise ConfigError(f"{field}: the artifact's features{src} are not this memroute's "
                          f"(missing {missing}, unknown {extra}, or another order): refit with "
                          "python -m jobs.calibrate", field=field)
    try:
        return Calibrator(names, tuple(map(float, data["mean"])), tuple(map(float, data["scale"])),
                          tuple(map(float, data["coef"])), float(data["intercept"]),
                          float(data.get("threshold", 0.5)), dict(data.get("meta") or {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{field}: a malformed calibrator artifact{src}: {exc}",
                          field=field) from exc


def load(path: str | Path, *, field: str = FIELD) -> Calibrator:
    """The artifact at ``path``; a missing or unreadable file is a ConfigError naming ``field``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{field}: no calibrator artifact at {p.resolve()} (fit one with "
                          "python -m jobs.calibrate run_id=<replay run>, or set "
                          f"{field}=null)", field=field)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{field}: cannot read {p}: {exc}", field=field) from exc
    return from_json(data, where=str(p), field=field)
