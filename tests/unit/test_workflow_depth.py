"""The workflow-depth experiment on mock tiers and the keyword fake retriever: seeded workflows,
exact per-step attribution, growth with top_k, the memory budget's cap, the fits, and the job
end to end (jobs.workflow_depth's config composed from conf/, report and plots written)."""

from __future__ import annotations

import json
import math
import time

import polars as pl
import pytest

from memroute import build
from memroute.config import ModelConfig, RetrievalConfig, RouterConfig
from memroute.config.workflow_depth import WorkflowDepthConfig, check_workflow_depth_config
from memroute.errors import ConfigError
from memroute.eval.workflow.analysis import fit_linear, fit_power, growth, growth_kind, per_depth
from memroute.eval.workflow.generate import locomo_workflows, seeded_workflows
from memroute.eval.workflow.steps import CountingRetriever, Variant, make_router, run_variant
from memroute.routing.prompt import render_memory_block

from .fakes import FakeRetriever, FakeStore

ANSWERS = {"answer": "Done: {query}", "memory_answer": "Done: {query}"}
# The probe is sure of itself except on its "Verify" steps, which escalate.
SMALL = ModelConfig(name="small", engine="mock", params_b=0.5, price_as_params_b=8.0,
                    engine_args={**ANSWERS,
                                 "rules": [{"match": r"^Step \d+: Verify", "logprob": -2.9}]})
LARGE = ModelConfig(name="large", engine="mock", params_b=8.0, price_as_params_b=235.0,
                    engine_args=dict(ANSWERS))
PROD = [8.0, 235.0]


class Recording:
    """A back end that keeps the engine's own prompt and completion counts of every reply."""

    def __init__(self, inner) -> None:
        self.inner, self.model_id = inner, inner.model_id
        self.prompt_tokens = self.completion_tokens = 0

    def generate_many(self, batch, **kw):
        replies = self.inner.generate_many(batch, **kw)
        self.prompt_tokens += sum(r.prompt_tokens for r in replies)
        self.completion_tokens += sum(r.completion_tokens for r in replies)
        return replies

    def __getattr__(self, name):
        return getattr(self.inner, name)


def routed(variant: Variant, *, depth: int = 12, workflows: int = 2, seed: int = 0):
    """Rows (and each step's Router result) of ``variant`` on fresh mock tiers and memory."""
    tiers = [build.tier(m, Recording(build.backend(m, None))) for m in (SMALL, LARGE)]
    counting = CountingRetriever(FakeRetriever())
    router = make_router(variant, tiers, RouterConfig(tau=0.5, max_tokens=32), RetrievalConfig(),
                         counting)
    results = []
    rows = run_variant(variant, router, seeded_workflows(seed, workflows, depth),
                       prod_params_b=PROD, retrieved=counting.retrieved,
                       on_result=lambda r, res: results.append((r, res)))
    return rows, results, tiers, router


def memory(k: int, budget: int = 8192) -> Variant:
    return Variant(f"memory_k{k}_b{budget}", "memory", k, budget, budget, "top_k")


def test_seeded_workflows_are_deterministic_and_a_deeper_one_extends_a_shallower_one():
    a, b = seeded_workflows(7, 3, 32), seeded_workflows(7, 3, 32)
    assert a == b and len({w.workflow_id for w in a}) == 3
    assert [w.steps[:8] for w in seeded_workflows(7, 2, 8)] == [w.steps[:8] for w in a[:2]]
    assert seeded_workflows(8, 1, 32)[0].steps != a[0].steps


@pytest.mark.parametrize("variant", [memory(5, 512), Variant("full_history", "full_history"),
                                     Variant("no_memory", "no_memory")], ids=lambda v: v.name)
def test_each_step_is_attributed_exactly_to_the_token(variant):
    rows, results, tiers, router = routed(variant)
    assert any(r["calls"] == 2 for r in rows), "the seeded steps include an escalating Verify step"
    for row, res in results:
        backend = tiers[res.decision.answered_tier].backend
        answering = next(c for c in res.calls if c.accepted)
        # base + injected + history = the answering prompt counted with the tier's tokenizer
        assert answering.input_tokens == backend.count_tokens(res.messages)
        assert answering.output_tokens == backend.count_text_tokens(res.answer)
        memories = res.decision.memories
        layout = router.layout_for(res.decision.answered_tier, row["query"])
        block = render_memory_block(memories, layout, float(row["session_time"]))
        assert answering.injected_tokens == (backend.count_text_tokens(block) if memories else 0)
        assert row["memory_block_tokens"] == row["answer_injected_tokens"]
        assert row["total_tokens"] == (row["base_tokens"] + row["injected_tokens"]
                                       + row["history_tokens"] + row["output_tokens"])
    # summed over every call, escalations included: the engines' own counts
    assert sum(r["input_tokens"] for r in rows) == sum(t.backend.prompt_tokens for t in tiers)
    assert sum(r["output_tokens"] for r in rows) == sum(t.backend.completion_tokens for t in tiers)
    assert sum(r["eff_cost"] for r in rows) == pytest.approx(
        sum((t.backend.prompt_tokens + 4 * t.backend.completion_tokens) * t.pricing.params_b / 8
            for t in tiers))
    injected = [r["injected_tokens"] for r in rows]
    history = [r["history_tokens"] for r in rows if r["depth"] > 1]
    if variant.condition == "memory":
        assert all(r["injected_tokens"] > 0 for r in rows if r["depth"] > 1)
        assert not any(history)
    elif variant.condition == "full_history":
        assert not any(injected) and all(history)
    else:
        assert not any(injected) and not any(history)


def test_injected_tokens_grow_with_top_k_until_k_steps_are_remembered():
    final = {}
    for k in (1, 2, 4, 8):
        rows, *_ = routed(memory(k), depth=12)
        for r in rows:  # the fake retriever finds every earlier step: top_k of them fit
            assert r["memories_injected"] == min(k, r["depth"] - 1)
            assert not r["budget_bound"]
        last = [r["answer_injected_tokens"] for r in rows if r["depth"] == 12]
        final[k] = sum(last) / len(last)
    assert final[1] < final[2] < final[4] < final[8]


def test_the_memory_budget_caps_injected_tokens():
    unbounded, *_ = routed(memory(32), depth=16)
    capped, *_ = routed(memory(32, budget=128), depth=16)
    assert max(r["answer_injected_tokens"] for r in unbounded) > 400
    assert all(r["answer_injected_tokens"] <= 128 for r in capped)
    assert all(r["injected_tokens"] <= 128 * r["calls"] for r in capped)
    bound = sorted({r["depth"] for r in capped if r["budget_bound"]})
    assert bound and bound == list(range(bound[0], 17))  # once it binds it stays bound
    fits = growth(per_depth(pl.DataFrame(capped)))
    assert fits["budget_binds_at"][0] == bound[0]
    assert fits["injected_call_max"][0] <= 128 < fits["injected_max"][0]  # a step: two calls


def test_the_power_fit_recovers_the_exponent():
    d = list(range(1, 33))
    a, b, r2 = fit_power(d, [3.0 * x for x in d])
    assert (a, b, r2) == (pytest.approx(3.0, abs=1e-4), pytest.approx(1.0, abs=1e-5),
                          pytest.approx(1.0))
    # a constant cost per step after a cheaper first one is still linear growth
    assert growth_kind(fit_power(d, [15.8 * x - 5.7 for x in d])[1]) == "linear"
    assert fit_power(d, [x ** 2 for x in d])[1] == pytest.approx(2.0, abs=1e-5)
    assert fit_linear(d, [2 * x + 1 for x in d])[:2] == (pytest.approx(2.0), pytest.approx(1.0))
    assert math.isnan(fit_power([1], [1.0])[1])
    assert [growth_kind(b) for b in (1.0, 1.5, 0.5)] == ["linear", "super-linear", "sub-linear"]


def test_locomo_workflows_are_runs_of_a_conversations_questions(tmp_path):
    turns = [{"speaker": "Ann" if i % 2 == 0 else "Bob", "dia_id": f"D1:{i + 1}",
              "text": f"line {i}"} for i in range(4)]
    qa = [{"question": f"What did Ann say {i}?", "answer": "x", "evidence": ["D1:1"], "category": 4}
          for i in range(7)]
    sample = {"sample_id": "conv-x", "qa": qa, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob", "session_1": turns,
        "session_1_date_time": "1:56 pm on 8 May, 2023"}}
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    found = locomo_workflows(path, ["conv-x"], [1, 2, 3, 4], count=5, depth=3)
    assert [w.workflow_id for w in found] == ["locomo-conv-x-q0", "locomo-conv-x-q3"]
    assert found[1].steps == ("What did Ann say 3?", "What did Ann say 4?", "What did Ann say 5?")


def test_a_bad_setting_names_its_field():
    cfg = WorkflowDepthConfig(cascade={"0": SMALL})
    check_workflow_depth_config(cfg)
    for change, fld in (({"conditions": ["memory", "cache"]}, "conditions"),
                        ({"top_k_sweep": [0]}, "top_k_sweep")):
        bad = WorkflowDepthConfig(cascade={"0": SMALL}, **change)
        with pytest.raises(ConfigError) as err:
            check_workflow_depth_config(bad)
        assert err.value.field == fld
    cfg.workflow.sources = ["seeded", "trace"]
    with pytest.raises(ConfigError, match="workflow.sources"):
        check_workflow_depth_config(cfg)


def test_the_job_runs_end_to_end_on_mock_tiers(tmp_path, monkeypatch):
    from jobs import workflow_depth
    from memroute.config.compose import compose

    started = time.perf_counter()
    retriever = FakeRetriever()
    parts = build.MemoryParts(None, FakeStore(retriever), retriever)
    monkeypatch.setattr(build, "memory", lambda *a, **k: parts)
    cfg = compose("workflow_depth", [
        "+experiment=workflow_mock", "tracking=disabled", f"output_dir={tmp_path / 'runs'}",
        f"dataset.path={tmp_path / 'no_locomo.json'}", "workflow.max_depth=16",
        "workflow.num_workflows=2", "top_k_sweep=[1,4]", "budget_sweep=[96]", "progress=false",
    ], WorkflowDepthConfig)
    workflow_depth.run(cfg)
    [run_dir] = (tmp_path / "runs").iterdir()
    report = (run_dir / "report.md").read_text()
    assert "skipped: locomo: no LoCoMo file" in report
    assert "## seeded workflows" in report and "cumulative EffCost" in report
    for name in ("steps.parquet", "steps.csv", "growth.csv", "depth_means.csv",
                 "cost_vs_depth_seeded.png", "injection_vs_depth_seeded.png"):
        assert (run_dir / name).stat().st_size > 0, name
    rows = pl.read_parquet(run_dir / "steps.parquet")
    assert sorted(rows["variant"].unique()) == ["full_history", "memory", "memory_b96",
                                                "memory_k1", "memory_k4", "no_memory"]
    assert rows.height == 6 * 2 * 16
    fits = {r["variant"]: r for r in pl.read_csv(run_dir / "growth.csv").iter_rows(named=True)}
    assert fits["full_history"]["b"] > 1.2 and fits["full_history"]["growth"] == "super-linear"
    assert fits["no_memory"]["growth"] == "linear"
    assert fits["no_memory"]["b"] <= fits["memory"]["b"] < fits["full_history"]["b"]
    # memory stops growing once top_k steps are remembered; history never does
    assert fits["memory_k1"]["saturation_depth"] < fits["memory_k4"]["saturation_depth"] <= 7
    assert fits["memory_k4"]["growth_tail"] == "linear"
    assert fits["full_history"]["growth_tail"] == "super-linear"
    assert time.perf_counter() - started < 30
    # the history the full_history condition sends is the chain itself, answers included
    full = rows.filter((pl.col("variant") == "full_history") & (pl.col("depth") == 2))
    assert all(h > 0 for h in full["history_tokens"])
