"""The sweep summary: configurations as rows, trials differing only in the seed pooled (mean, sd)."""

from __future__ import annotations

import csv
import io
import statistics

import pytest

from memroute.tracking.sweep_summary import Trial, pool, summarize_sweep


def trial(run_id, top_k, seed, f1, tokens, status="FINISHED", **extra):
    params = {"retrieval.top_k": str(top_k), "dataset.seed": str(seed), "router.tau": "0.5", **extra}
    metrics = {"warm_memory_only.f1": f1, "warm_memory_only.memory_tokens_per_q": tokens,
               "warm_memory_only.eff_cost": tokens / 10, "warm_memory_only.wrong": 1.0}
    return Trial(run_id, params, metrics, status)


CAPACITY = [
    trial("a0", 2, 0, 40.0, 90.0), trial("a1", 2, 1, 44.0, 100.0), trial("a2", 2, 2, 48.0, 110.0),
    trial("b0", 16, 0, 50.0, 700.0), trial("b1", 16, 1, 60.0, 720.0), trial("b2", 16, 2, 55.0, 740.0),
    trial("c0", 4, 0, 45.0, 200.0),
]


def test_seeds_pool_into_mean_and_sample_sd():
    s = summarize_sweep(CAPACITY, metric_patterns=["*.f1", "*.memory_tokens_per_q", "*.eff_cost"],
                        swept_keys=["retrieval.top_k", "dataset.seed"])
    assert s.keys == ["retrieval.top_k"]  # the seed is pooled, router.tau never varied
    assert s.seed_key == "dataset.seed" and s.pooled
    assert s.metrics == ["warm_memory_only.f1", "warm_memory_only.memory_tokens_per_q", "warm_memory_only.eff_cost"]
    assert [r.values["retrieval.top_k"] for r in s.rows] == ["2", "4", "16"]  # numeric, not text, order
    two, four, sixteen = s.rows
    assert two.run_ids == ["a0", "a1", "a2"] and two.seeds == ["0", "1", "2"]
    f1 = sixteen.stats["warm_memory_only.f1"]
    assert f1.n == 3 and f1.mean == pytest.approx(55.0) and f1.sd == pytest.approx(5.0)  # stdev(50, 60, 55)
    assert two.stats["warm_memory_only.memory_tokens_per_q"].sd == pytest.approx(10.0)
    assert four.stats["warm_memory_only.f1"].sd is None  # one seed: no sd
    assert s.best(s.objective(["*.f1"])) is sixteen
    assert s.best("warm_memory_only.memory_tokens_per_q", mode="min") is two


def test_markdown_and_csv_carry_every_configuration():
    s = summarize_sweep(CAPACITY, metric_patterns=["*.f1"])
    md = s.to_markdown()
    assert md.splitlines()[0] == "| retrieval.top_k | n | warm_memory_only.f1 |"
    assert "| 16 | 3 | 55.0 ± 5.0 |" in md and "| 4 | 1 | 45.0 |" in md
    assert "pooled over `dataset.seed`" in md
    rows = list(csv.DictReader(io.StringIO(s.to_csv())))
    assert [r["retrieval.top_k"] for r in rows] == ["2", "4", "16"]
    assert float(rows[2]["warm_memory_only.f1.mean"]) == pytest.approx(55.0)
    assert float(rows[0]["warm_memory_only.f1.sd"]) == pytest.approx(statistics.stdev([40, 44, 48]))
    assert rows[1]["warm_memory_only.f1.sd"] == "" and rows[2]["run_ids"] == "b0 b1 b2"


def test_without_seeds_every_trial_is_its_own_row():
    trials = [trial("x", 5, 0, 10.0, 1.0, **{"router.tau": "0.3"}), trial("y", 5, 0, 20.0, 1.0, **{"router.tau": "0.7"})]
    s = summarize_sweep(trials, metric_patterns=["*.f1"], swept_keys=["router.tau"])
    assert s.keys == ["router.tau"] and s.seed_key is None and not s.pooled  # top_k never varied
    assert [len(r.run_ids) for r in s.rows] == [1, 1]
    assert "±" not in s.to_markdown()


def test_group_sweep_params_are_keys_so_different_models_never_pool():
    # model@cascade.0=a,b changes several params: both become keys, nothing is averaged across models
    trials = [trial("m1", 5, 0, 10.0, 1.0, **{"cascade.0.name": "a", "cascade.0.params_b": "0.5"}),
              trial("m2", 5, 0, 30.0, 1.0, **{"cascade.0.name": "b", "cascade.0.params_b": "1.5"})]
    s = summarize_sweep(trials, metric_patterns=["*.f1"], swept_keys=["model"])
    assert s.keys == ["cascade.0.name", "cascade.0.params_b"] and len(s.rows) == 2


def test_unfinished_trials_are_left_out_and_named():
    trials = [*CAPACITY[:3], trial("dead", 2, 3, 0.0, 0.0, status="FAILED")]
    s = summarize_sweep(trials, metric_patterns=["*.f1"])
    assert s.unfinished == ["dead"] and s.rows[0].run_ids == ["a0", "a1", "a2"]
    assert "1 unfinished trial(s) left out: dead" in s.to_markdown()


def test_objective_picks_the_first_matching_pattern():
    s = summarize_sweep(CAPACITY, metric_patterns=["*.memory_tokens_per_q", "*.f1"])
    assert s.objective(["warm_compound.f1", "*.f1"]) == "warm_memory_only.f1"
    assert s.objective(["nothing"]) == "warm_memory_only.memory_tokens_per_q"  # no match: the first tabulated
    with pytest.raises(ValueError, match="mode"):
        s.best("warm_memory_only.f1", mode="best")


def test_pool_skips_nan_and_handles_empty():
    st = pool([1.0, float("nan"), 3.0])
    assert (st.mean, st.n) == (2.0, 2) and st.sd == pytest.approx(2 ** 0.5)
    assert pool([]).mean is None and pool([]).n == 0
