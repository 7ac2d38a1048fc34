"""The benchmark, the Serve app and the replay are built from one parts schema
(``PartsConfig``: embedder, memory, retrieval, cascade, router, assets): its flat keys compose
alike in all three, and a bad part is refused by all three with the same error naming the field."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from memroute.config.compose import compose, compose_serve_config
from memroute.config.replay import ReplayConfig, check_replay_config
from memroute.config.schema import (
    BenchmarkConfig,
    PartsConfig,
    check_benchmark_config,
    check_model_paths,
    check_parts,
)
from memroute.config.serve import ServeConfig, check_serve_config
from memroute.errors import ConfigError

CHECKS = {"benchmark": check_benchmark_config, "serve": check_serve_config,
          "replay": check_replay_config}
PARTS = [f.name for f in fields(PartsConfig)]


def _compose(job: str, overrides: list[str]) -> PartsConfig:
    if job == "serve":
        return compose_serve_config("cpu-tiny", overrides)
    if job == "replay":
        return compose("replay", ["trace=t.jsonl", *overrides], ReplayConfig)
    return compose("benchmark", overrides, BenchmarkConfig)


@pytest.fixture(scope="module")
def configs() -> dict[str, PartsConfig]:
    return {job: _compose(job, []) for job in CHECKS}


def test_the_three_configs_inherit_the_one_parts_schema():
    assert {"embedder", "memory", "retrieval", "cascade", "router", "assets"} <= set(PARTS)
    for schema in (BenchmarkConfig, ServeConfig, ReplayConfig):
        assert issubclass(schema, PartsConfig)
        own = {f.name: f.type for f in fields(schema)}
        assert {name: own[name] for name in PARTS} == {f.name: f.type for f in fields(PartsConfig)}


def test_the_defaults_pass_every_check(configs):
    for job, cfg in configs.items():
        assert CHECKS[job](cfg) is cfg


def test_flat_part_keys_compose_alike_in_all_three():
    for job in CHECKS:
        cfg = _compose(job, ["router.tau=0.7", "retrieval.top_k=7", "model@cascade.0=mock"])
        assert cfg.router.tau == 0.7 and cfg.retrieval.top_k == 7, job
        assert cfg.cascade["0"].name == "mock-small" and cfg.cascade["0"].engine == "mock", job
        CHECKS[job](cfg)


BAD = [
    ("router", {"tau": 1.5}, "router.tau"),
    ("router", {"l_min": 0.0}, "router.l_min"),
    ("router", {"calibrator_threshold": -0.1}, "router.calibrator_threshold"),
    ("retrieval", {"top_k": 0}, "retrieval.top_k"),
    ("retrieval", {"alpha": 1.2}, "retrieval.alpha"),
    ("retrieval", {"bm25_backend": "milvus"}, "retrieval.bm25_backend"),  # memory.bm25_function off
    ("embedder", {"batch_size": 0}, "embedder.batch_size"),
    ("memory", {"timeout_s": 0.0}, "memory.timeout_s"),
    ("cascade", {"max_model_len": 0}, "cascade.1.max_model_len"),
]


@pytest.mark.parametrize("part, changes, field", BAD, ids=[b[2] for b in BAD])
def test_a_bad_part_is_refused_alike_by_all_three(configs, part, changes, field):
    errors = {}
    for job, cfg in configs.items():
        if part == "cascade":  # the last tier, so the slot index is in the field
            bad = replace(cfg, cascade={**cfg.cascade, "1": replace(cfg.cascade["1"], **changes)})
        else:
            bad = replace(cfg, **{part: replace(getattr(cfg, part), **changes)})
        with pytest.raises(ConfigError) as err:
            CHECKS[job](bad)
        errors[job] = (err.value.field, str(err.value))
        with pytest.raises(ConfigError) as direct:
            check_parts(bad)
        assert (direct.value.field, str(direct.value)) == errors[job]
    assert errors["benchmark"] == errors["serve"] == errors["replay"]
    assert errors["benchmark"][0] == field and field in errors["benchmark"][1]


def test_an_empty_cascade_is_refused_alike(configs):
    for job, cfg in configs.items():
        bad = replace(cfg, cascade={}, **({"deploy": {}} if job == "serve" else {}))
        with pytest.raises(ConfigError) as err:
            CHECKS[job](bad)
        assert err.value.field == "cascade", job


def test_missing_model_folders_are_refused_where_the_parts_load_here(configs):
    """The benchmark and the Serve app load the parts on this machine; the replay's config is
    also composed off it (the RayJob's /weights) and an http target loads nothing."""
    for part, field in (("embedder", "embedder.path"), ("cascade", "cascade.1.path")):
        errors = set()
        for job, cfg in configs.items():
            if part == "cascade":
                bad = replace(cfg, cascade={**cfg.cascade, "1": replace(cfg.cascade["1"],
                                                                        path="/nonexistent/m")})
            else:
                bad = replace(cfg, embedder=replace(cfg.embedder, path="/nonexistent/m"))
            if job == "replay":
                CHECKS[job](bad)
                continue
            with pytest.raises(ConfigError) as err:
                CHECKS[job](bad)
            errors.add((err.value.field, str(err.value)))
            with pytest.raises(ConfigError):
                check_model_paths(bad)
        assert len(errors) == 1 and next(iter(errors))[0] == field
