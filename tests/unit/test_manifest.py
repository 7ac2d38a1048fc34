"""Run manifest: hashes move when a template or model file changes, and drift is detected."""

import json

import pytest

from memroute.config import BenchmarkConfig, ModelConfig, RouterConfig
from memroute.eval import manifest as mf
from memroute.routing import prompt as injection


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    return folder


def _manifest(tmp_path, model_dir, **router):
    cfg = BenchmarkConfig(
        cascade={"0": ModelConfig(name="small", engine="transformers", path=str(model_dir)),
                 "1": ModelConfig(name="remote", engine="openai_http", base_url="http://127.0.0.1:1")},
        router=RouterConfig(**router),
    )
    return mf.build_manifest(
        cfg, flat_config={"router.system_prompt": cfg.router.system_prompt}, files={},
        small_model="small", group_col="fact_type", wrong_below=0.5, assets=None,
    )


def test_injection_hash_changes_with_the_memory_header(monkeypatch):
    before = mf.injection_template_sha256()
    assert mf.injection_template_sha256() == before  # deterministic
    monkeypatch.setattr(injection, "MEMORY_HEADER", "Memories:")
    assert mf.injection_template_sha256() != before


def test_injection_hash_changes_with_the_memory_line_format(monkeypatch):
    before = mf.injection_template_sha256()
    monkeypatch.setattr(injection, "memory_line", lambda hit, dates=True, reply=True: f"* {hit.memory.text}")
    assert mf.injection_template_sha256() != before


def test_manifest_hashes_the_runs_memory_layout_and_drift_checks_it(tmp_path, model_dir):
    flat = {"router.memory_order": "relevance", "router.current_date": False}
    default = _manifest(tmp_path, model_dir)
    ablated = mf.build_manifest(
        BenchmarkConfig(cascade={"0": ModelConfig(name="small", engine="transformers", path=str(model_dir))},
                        router=RouterConfig(memory_order="relevance", current_date=False)),
        flat_config={**flat, "router.system_prompt": RouterConfig().system_prompt}, files={},
        small_model="small", group_col="fact_type", wrong_below=0.5, assets=None,
    )
    assert ablated["templates"]["memory_injection"] != default["templates"]["memory_injection"]
    # the saved layout is recomputed from the run's config: an ablation run is not "drifted"
    assert "memory_injection" not in [c[0] for c in mf.template_drift(ablated, None).changed]


def test_full_context_hash_changes_with_the_history_layout(monkeypatch):
    from memroute.eval import full_context

    before = mf.full_context_template_sha256()
    assert mf.full_context_template_sha256() == before
    monkeypatch.setattr(full_context, "HISTORY_HEADER", "Conversation:")
    changed_header = mf.full_context_template_sha256()
    monkeypatch.undo()
    monkeypatch.setattr(full_context, "OMITTED_NOTE", "({n} turns cut.)")
    assert len({before, changed_header, mf.full_context_template_sha256()}) == 3


def test_drift_names_a_changed_full_context_template(tmp_path, model_dir, monkeypatch):
    from memroute.eval import full_context

    manifest = _manifest(tmp_path, model_dir)
    monkeypatch.setattr(full_context, "HISTORY_HEADER", "Conversation:")
    assert [name for name, _, _ in mf.template_drift(manifest, None).changed] == [
        "full_context_history"
    ]


def test_chat_template_from_tokenizer_config_or_jinja(tmp_path, model_dir):
    assert mf.chat_template_text(model_dir) == "{{ messages }}"
    other = tmp_path / "jinja"
    other.mkdir()
    (other / "tokenizer_config.json").write_text("{}")
    (other / "chat_template.jinja").write_text("{% for m in messages %}{% endfor %}")
    assert mf.chat_template_text(other).startswith("{% for")
    assert mf.chat_template_text(tmp_path) is None


def test_model_files_hash_covers_tokenizer_files(model_dir, tmp_path):
    before = mf.model_files_sha256(model_dir)
    (model_dir / "tokenizer.json").write_text("{}")
    assert mf.model_files_sha256(model_dir) != before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert mf.model_files_sha256(empty) is None


def test_manifest_records_templates_artifacts_versions(tmp_path, model_dir):
    m = _manifest(tmp_path, model_dir)
    assert set(m["templates"]) == {"system_prompt", "memory_injection", "full_context_history",
                                   "chat_template:small", "chat_template:remote"}
    assert m["templates"]["chat_template:remote"] is None  # remote-only tier: nothing local
    assert m["templates"]["system_prompt"] == mf.sha256_text(RouterConfig().system_prompt)
    assert m["system_prompt_is_default"] is True
    small = m["tiers"][0]
    assert small["files_sha256"] == mf.model_files_sha256(model_dir) and small["asset_sha256"] is None
    assert m["libraries"]["polars"] and m["libraries"]["memroute"]
    assert m["seeds"]["dataset.seed"] == 0
    json.dumps(m)  # serializable as is


def test_no_drift_when_nothing_changed(tmp_path, model_dir):
    drift = mf.template_drift(_manifest(tmp_path, model_dir), assets=None)
    assert drift.changed == [] and drift.unchecked == []


def test_drift_names_a_changed_chat_template(tmp_path, model_dir):
    m = _manifest(tmp_path, model_dir)
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ other }}"}))
    drift = mf.template_drift(m, assets=None)
    assert [name for name, _, _ in drift.changed] == ["chat_template:small"]
    assert "chat_template:small (saved" in drift.describe()[0]


def test_drift_on_a_changed_default_system_prompt(tmp_path, model_dir):
    m = _manifest(tmp_path, model_dir)
    m["templates"]["system_prompt"] = mf.sha256_text("the default prompt of an older version")
    assert [n for n, _, _ in mf.template_drift(m, None).changed] == ["system_prompt"]


def test_custom_system_prompt_is_checked_against_its_saved_text(tmp_path, model_dir):
    m = _manifest(tmp_path, model_dir, system_prompt="Be terse.")
    assert m["system_prompt_is_default"] is False
    assert mf.template_drift(m, None).changed == []
    m["config"]["router.system_prompt"] = "Be verbose."
    assert [n for n, _, _ in mf.template_drift(m, None).changed] == ["system_prompt"]


def test_missing_model_folder_is_unchecked_not_drift(tmp_path, model_dir):
    m = _manifest(tmp_path, model_dir)
    for f in model_dir.iterdir():
        f.unlink()
    model_dir.rmdir()
    drift = mf.template_drift(m, None)
    assert drift.changed == [] and drift.unchecked == ["chat_template:small"]


def test_metric_version_moves_with_the_scoring_rules():
    a = mf.metric_version(0.5)
    assert mf.metric_version(0.5) == a
    assert mf.metric_version(0.3)["sha256"] != a["sha256"]
    assert a["settings"]["causes"]["wrong_below"] == 0.5


def test_library_versions_names_missing_packages():
    v = mf.library_versions(["polars", "surely-not-installed-pkg"])
    assert v["polars"] and v["surely-not-installed-pkg"] is None
