"""At cluster scale: an HTTP replay sharded across Ray tasks (a user's requests in one task, in
order) against the Serve app, whose replica counts are sampled during the replay and after it.
Mock engines (0.4 s per call on tier 0) keep it short. The ingress routes several batches at once
(``ingress.max_concurrent_batches``), so tier 0 sees the clients' calls in flight: its autoscaler
adds the second replica under the load and removes it after (docs/BENCHMARKS.md, "Replay at
cluster scale")."""

from __future__ import annotations


import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from .serving import deployed, free_port  # noqa: E402

KEY = "sk-scale"
USERS = [f"scaler{i}" for i in range(8)]
PER_USER = 6
DOWN_S = 4.0  # tier 0's downscale delay
# Serve pushes autoscaling metrics every 10 s by default; a test cannot wait that long.
PUSH_INTERVALS = ("RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S",
                  "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S")


def serve_config(tmp, port: int):
    from memroute.config.api import ApiConfig
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig, ModelConfig, RouterConfig
    from memroute.config.serve import AutoscalingConfig, HttpConfig, IngressConfig, ServeConfig, TierDeployConfig

    one = AutoscalingConfig(min_replicas=1, max_replicas=1)
    scaling = AutoscalingConfig(min_replicas=1, max_replicas=2, target_ongoing_requests=1.0,
                                upscale_delay_s=1.0, downscale_delay_s=DOWN_S, look_back_period_s=2.0)
    small = ModelConfig(name="mock-small", engine="mock", params_b=0.5,
                        engine_args={"logprob": -0.05, "latency_s": 0.4})
    large = ModelConfig(name="mock-large", engine="mock", params_b=8.0, engine_args={"logprob": -0.01})
    return ServeConfig(
        http=HttpConfig(port=port),
        # one request per batch, 8 batches at once: concurrent requests reach tier 0 as concurrent calls
        ingress=IngressConfig(num_cpus=0.25, autoscaling=one, max_batch_size=1, max_concurrent_batches=8),
        cascade={"0": small, "1": large},
        deploy={"0": TierDeployConfig(num_cpus=0.25, autoscaling=scaling, max_batch_size=1),
                "1": TierDeployConfig(num_cpus=0.25, autoscaling=one)},
        memory=MemoryConfig(uri=str(tmp / "milvus.db"), collection="memroute_scale"),
        router=RouterConfig(tau=0.5, max_tokens=16),
        journal=JournalConfig(path=str(tmp / "journal.sqlite3")),
        api=ApiConfig(api_keys={KEY: "acme"}),
        blocking=False,
    )


def trace():
    from memroute.datasets.records import TraceRequest
    from memroute.types import Message

    rows, ts = [], 1_700_000_000.0
    for k in range(PER_USER):
        for u in USERS:
            ts += 1
            rows.append(TraceRequest(f"s{len(rows):04d}", ts, "acme", u, f"{u}-d1",
                                     (Message("user", f"Note {k}: my number is {k}."),)))
    return rows


def tier0_replicas() -> int:
    from ray import serve

    for app in serve.status().applications.values():
        for name, dep in app.deployments.items():
            if name.startswith("tier0"):
                return sum(n for s, n in dep.replica_states.items() if str(getattr(s, "value", s)) == "RUNNING")
    return 0


def test_a_sharded_replay_scales_tier0_up_and_back_down_and_answers_each_request_once(tmp_path, monkeypatch):
    from memroute.config.replay import ReplayConfig
    from memroute.eval.replay.outcome import TierPrice
    from pipelines.replay import replay_http_sharded, replicas_table

    port = free_port()
    monkeypatch.setenv("MEMROUTE_SCALE_KEY", KEY)
    for name in PUSH_INTERVALS:  # read by the Serve processes Ray starts from this one
        monkeypatch.setenv(name, "0.5")
    with deployed(serve_config(tmp_path, port), port) as up:
        cfg = ReplayConfig(trace="unused", target=up["url"], strategies=["memroute"], concurrency=4,
                           api_key_env="MEMROUTE_SCALE_KEY", shards=2, watch_after_s=60.0)
        requests = trace()
        merged, sampler = replay_http_sharded(cfg, [TierPrice(0.5, 8.0), TierPrice(8.0, 235.0)], requests,
                                              tmp_path, shards=2, sample_every_s=0.5)
        assert sorted(r["request_id"] for r in merged.rows) == sorted(r.request_id for r in requests)
        table = {r["deployment"]: r for r in replicas_table(sampler.samples)}
        assert set(table) == {"router", "tier0-mock-small", "tier1-mock-large"}, table
        tier0 = table["tier0-mock-small"]
        assert (tier0["start"], tier0["peak"], tier0["end"]) == (1, 2, 1), table  # up, then down
        assert all(r["peak"] == 1 for d, r in table.items() if d != "tier0-mock-small"), table
        assert tier0_replicas() == 1
        assert (tmp_path / "replicas.csv").read_text().startswith("t_s,deployment,replicas")
        for k in range(2):  # each shard kept its own checkpoint, merged into rows.jsonl
            assert (tmp_path / f"rows.shard{k}.jsonl").is_file()
        assert (tmp_path / "rows.jsonl").read_text().count("\n") == len(requests)
