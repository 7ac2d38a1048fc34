"""The Kubernetes manifests under infra/: parse, validate against their kinds' schemas, no drift.

- serveConfigV2 of infra/kuberay/rayservice.yaml is re-rendered from serve.app:build_app by
  infra/render.py (Ray's `serve build`) into a temp copy and must equal the checked-in file;
  otherwise the failure shows the diff and the fix (`make manifests`).
- Every YAML document under infra/ (but the Milvus Helm values) is validated with `jsonschema`
  against the schema of its apiVersion/kind vendored in tests/k8s_schemas/ (README there: sources
  and versions): Kubernetes v1.31 standalone-strict schemas for the built-in kinds, the KubeRay
  v1.5.1 CRD schemas for RayService / RayJob / RayCluster, made strict here (unknown fields
  refused, like the API server's strict field validation) and given ObjectMeta for `metadata`.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
SCHEMAS = ROOT / "tests" / "k8s_schemas"
RAYSERVICE = INFRA / "kuberay" / "rayservice.yaml"
HELM_VALUES = {INFRA / "milvus" / "values.yaml"}  # values for a chart, not Kubernetes objects

# (apiVersion, kind) -> vendored schema file; a new kind needs its schema vendored first.
KINDS = {
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("apps/v1", "StatefulSet"): "statefulset-apps-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaim-v1.json",
    ("v1", "ConfigMap"): "configmap-v1.json",
    ("ray.io/v1", "RayService"): "rayservice-ray-v1.json",
    ("ray.io/v1", "RayJob"): "rayjob-ray-v1.json",
    ("ray.io/v1", "RayCluster"): "raycluster-ray-v1.json",
}
CRD_KINDS = {"RayService", "RayJob", "RayCluster"}

# ray.serve.schema (imported to validate serveConfigV2) warns about its own pydantic usage.
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20")


def _yaml_files() -> list[Path]:
    return sorted(p for p in INFRA.rglob("*") if p.suffix in (".yaml", ".yml"))


def _documents() -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in _yaml_files():
        if path in HELM_VALUES:
            continue
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append((str(path.relative_to(ROOT)), i, doc))
    return out


def _strict(schema: Any) -> Any:
    """A CRD schema that refuses unknown fields: ``additionalProperties: false`` on every object
    with ``properties`` that neither allows extra keys nor preserves unknown fields."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _validator(kind_key: tuple[str, str]) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / KINDS[kind_key]).read_text())
    if kind_key[1] in CRD_KINDS:
        schema = _strict(schema)
        # The CRD schema leaves metadata to the API server: check it as ObjectMeta, and pin
        # apiVersion/kind like the built-in schemas do.
        meta = json.loads((SCHEMAS / "deployment-apps-v1.json").read_text())["properties"]["metadata"]
        schema["properties"]["metadata"] = meta
        schema["properties"]["apiVersion"] = {"type": "string", "enum": [kind_key[0]]}
        schema["properties"]["kind"] = {"type": "string", "enum": [kind_key[1]]}
        schema.setdefault("required", [])
        schema["required"] = sorted(set(schema["required"]) | {"apiVersion", "kind", "metadata", "spec"})
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def _errors(doc: dict[str, Any]) -> list[str]:
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [f"no vendored schema for apiVersion={key[0]!r} kind={key[1]!r} (tests/k8s_schemas/)"]
    errors = sorted(_validator(key).iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}" for e in errors]


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _render_module():
    spec = importlib.util.spec_from_file_location("memroute_infra_render", INFRA / "render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Parsing and schema validation


def test_every_yaml_file_under_infra_parses():
    files = _yaml_files()
    assert len(files) >= 8, files
    for path in files:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert any(d is not None for d in docs), f"{path}: no YAML document"


def test_every_kind_has_a_vendored_schema_file():
    for name in set(KINDS.values()):
        assert (SCHEMAS / name).is_file(), name
    assert (SCHEMAS / "README.md").is_file()


@pytest.mark.parametrize("where,index,doc", _documents(), ids=lambda v: v if isinstance(v, str) else None)
def test_document_validates_against_the_schema_of_its_kind(where, index, doc):
    errors = _errors(doc)
    assert not errors, f"{where} document {index} ({doc.get('kind')}):\n" + "\n".join(errors)


def test_the_manifests_cover_the_expected_objects():
    kinds = {(d.get("kind"), (d.get("metadata") or {}).get("name") or d["metadata"].get("generateName"))
             for _, _, d in _documents()}
    for expected in [("RayService", "memroute"), ("RayCluster", "memroute-gpu"),
                     ("RayJob", "memroute-ingest-"), ("RayJob", "memroute-sweep-"),
                     ("RayJob", "memroute-replay-"), ("StatefulSet", "postgres"),
                     ("Service", "postgres"), ("Deployment", "mlflow"), ("Service", "mlflow"),
                     ("PersistentVolumeClaim", "memroute-journal")]:
        assert expected in kinds, expected


def test_helm_values_parse():
    values = yaml.safe_load((INFRA / "milvus" / "values.yaml").read_text())
    # keys of the zilliztech/milvus chart that memroute relies on (standalone, image, auth, env)
    assert values["cluster"]["enabled"] is False
    assert {"image", "standalone", "extraConfigFiles"} <= set(values)
    assert yaml.safe_load(values["extraConfigFiles"]["user.yaml"])["common"]["security"]["authorizationEnabled"]


def _doc(path: Path, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in _load(path) if d["kind"] == kind))


@pytest.mark.parametrize("path,kind,mutate,field", [
    # a wrong type deep inside the pod template of a CRD
    (RAYSERVICE, "RayService",
     lambda d: d["spec"]["rayClusterConfig"]["workerGroupSpecs"][0].__setitem__("replicas", "one"),
     "spec.rayClusterConfig.workerGroupSpecs.0.replicas"),
    # an unknown (misspelt) field in a CRD: refused only because the test makes CRDs strict
    (RAYSERVICE, "RayService", lambda d: d["spec"].__setitem__("serveConfigV3", "x"), "spec"),
    (INFRA / "kuberay" / "rayjob-replay.yaml", "RayJob",
     lambda d: d["spec"].__setitem__("entrypointNumGpus", "one"), "spec.entrypointNumGpus"),
    (INFRA / "kuberay" / "raycluster.yaml", "RayCluster",
     lambda d: d["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].__setitem__("imagePullPolicy", 3),
     "spec.workerGroupSpecs.0.template.spec.containers.0.imagePullPolicy"),
    # a missing required field (a container without a name)
    (INFRA / "kuberay" / "raycluster.yaml", "RayCluster",
     lambda d: d["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("name"),
     "spec.headGroupSpec.template.spec.containers.0"),
    (INFRA / "mlflow" / "mlflow.yaml", "Deployment",
     lambda d: d["spec"].__setitem__("replicas", "1"), "spec.replicas"),
    (INFRA / "postgres" / "postgres.yaml", "StatefulSet",
     lambda d: d["spec"]["template"]["spec"].__setitem__("containerz", []), "spec.template.spec"),
    (INFRA / "postgres" / "postgres.yaml", "Service",
     lambda d: d["spec"]["ports"][0].__setitem__("port", "5432"), "spec.ports.0.port"),
    (RAYSERVICE, "PersistentVolumeClaim",
     lambda d: d["spec"].__setitem__("accessModes", "ReadWriteOnce"), "spec.accessModes"),
    (RAYSERVICE, "RayService", lambda d: d["metadata"].__setitem__("labels", ["x"]), "metadata.labels"),
])
def test_the_validator_refuses_a_broken_document(path, kind, mutate, field):
    doc = _doc(path, kind)
    assert not _errors(doc)
    mutate(doc)
    errors = _errors(doc)
    assert errors, f"a broken {kind} passed validation"
    assert any(e.startswith(field + ":") for e in errors), errors


def test_an_unknown_kind_is_refused():
    assert _errors({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})[0].startswith("no vendored schema")


# ---------------------------------------------------------------------------------------------
# serveConfigV2 drift


@pytest.fixture(scope="module")
def rendered_serve_config() -> str:
    """serveConfigV2 as infra/render.py renders it now: one `serve build` (a subprocess, ~5 s)."""
    render = _render_module()
    deployments, ray_version = render.build_deployments({k: v for k, v, _ in render.ARGS})
    text = render.render_serve_config(deployments, ray_version)
    render.validate_serve_config(text)  # a ServeDeploySchema with our import path and args
    return text


def _drift(checked_in: str, serve_config: str, tmp_path: Path) -> str | None:
    """None when re-rendering ``checked_in`` (in a temp copy) changes nothing; else the failure
    message: the unified diff and the command that fixes it."""
    render = _render_module()
    copy_path = tmp_path / "rayservice.yaml"
    copy_path.write_text(checked_in)
    rendered = render.splice(copy_path.read_text(), serve_config)
    if rendered == checked_in:
        return None
    diff = "".join(difflib.unified_diff(
        checked_in.splitlines(keepends=True), rendered.splitlines(keepends=True),
        "infra/kuberay/rayservice.yaml (checked in)", "infra/kuberay/rayservice.yaml (rendered)"))
    return ("serveConfigV2 differs from what serve.app:build_app builds; fix it with `make manifests` "
            f"(infra/render.py)\n{diff}")


def test_serve_config_is_rendered_from_build_app(rendered_serve_config, tmp_path):
    message = _drift(RAYSERVICE.read_text(), rendered_serve_config, tmp_path)
    if message:
        pytest.fail(message, pytrace=False)


def test_drift_is_reported_with_a_diff_and_the_fix(rendered_serve_config, tmp_path):
    edited = RAYSERVICE.read_text().replace("num_gpus: 0.8", "num_gpus: 0.7", 1)
    assert edited != RAYSERVICE.read_text()
    message = _drift(edited, rendered_serve_config, tmp_path)
    assert message and "`make manifests`" in message
    assert "-              num_gpus: 0.7\n+              num_gpus: 0.8\n" in message


def test_render_refuses_a_manifest_without_markers():
    render = _render_module()
    with pytest.raises(SystemExit, match="markers not found"):
        render.splice("apiVersion: v1\n", "proxy_location: EveryNode\n")


def test_splice_replaces_only_the_block_between_the_markers():
    render = _render_module()
    text = f"a: 1\nspec:\n{render.BEGIN}\n  serveConfigV2: old\n{render.END}\n  b: 2\n"
    out = render.splice(text, "x: 1\n\ny: 2\n")
    assert out == f"a: 1\nspec:\n{render.BEGIN}\n  serveConfigV2: |\n    x: 1\n\n    y: 2\n{render.END}\n  b: 2\n"


# ---------------------------------------------------------------------------------------------
# Consistency between the manifests, the serve config and conf/


def _serve_config() -> dict[str, Any]:
    return yaml.safe_load(_doc(RAYSERVICE, "RayService")["spec"]["serveConfigV2"])


def test_gpu_worker_holds_every_deployment_at_full_scale():
    spec = _doc(RAYSERVICE, "RayService")["spec"]["rayClusterConfig"]
    [worker] = spec["workerGroupSpecs"]
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    gpus = sum(float(v) for k, v in limits.items() if k.endswith("gpu"))  # KubeRay's rule
    cpus = cpus_needed = gpus_needed = 0.0
    cpus = float(limits["cpu"])
    for d in _serve_config()["applications"][0]["deployments"]:
        n = d["autoscaling_config"]["max_replicas"]
        cpus_needed += n * d["ray_actor_options"].get("num_cpus", 1)
        gpus_needed += n * d["ray_actor_options"].get("num_gpus", 0)
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # all replicas on the worker
    assert cpus_needed <= cpus and 0 < gpus_needed <= gpus, (cpus_needed, cpus, gpus_needed, gpus)


def test_gpu_preset_targets_an_amd_mi300x_node():
    preset = yaml.safe_load((ROOT / "conf" / "serve" / "gpu.yaml").read_text())
    assert preset["accelerator"]["name"] == "MI300X"
    assert _serve_config()["applications"][0]["args"]["preset"] == "gpu"
    spec = _doc(RAYSERVICE, "RayService")["spec"]["rayClusterConfig"]
    pod = spec["workerGroupSpecs"][0]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits.get("amd.com/gpu") == 1 and "nvidia.com/gpu" not in limits
    assert all(t["key"] == "amd.com/gpu" for t in pod["tolerations"])
    assert all(k.startswith("amd.com/") for k in pod["nodeSelector"])
    images = [c["image"] for c in [*pod["containers"], *spec["headGroupSpec"]["template"]["spec"]["containers"]]]
    assert all("rocm" in image for image in images), images


def test_bm25_function_matches_between_ingest_and_the_endpoint():
    ingest = _doc(INFRA / "kuberay" / "rayjob-ingest.yaml", "RayJob")["spec"]["entrypoint"]
    [value] = re.findall(r"memory\.bm25_function=(\S+)", ingest)
    assert value == _serve_config()["applications"][0]["args"]["memory.bm25_function"]


def test_replay_entrypoint_composes_against_conf():
    from memroute.config.compose import compose
    from memroute.config.replay import ReplayConfig, check_replay_config

    words = _doc(INFRA / "kuberay" / "rayjob-replay.yaml", "RayJob")["spec"]["entrypoint"].split()
    assert words[:3] == ["python", "-m", "jobs.replay"]
    assert all(not set(w) & set("$'\"&;") for w in words)  # survives bash -c then sh -c
    cfg = check_replay_config(compose("replay", words[3:], ReplayConfig))
    assert cfg.strategies[0] == "memroute" and len(cfg.strategies) > 1 and cfg.target == "inprocess"
    assert [m.name for m in cfg.cascade.values()] == ["qwen3-8b", "qwen3-235b-awq"]
    assert cfg.tracking.tracking_uri == "http://mlflow:5000"


def test_every_referenced_secret_is_created_in_the_readme():
    readme = (INFRA / "README.md").read_text()
    names = set()
    for path in _yaml_files():
        names |= set(re.findall(r"secretKeyRef:\s*\{name:\s*([\w-]+)", path.read_text()))
    assert {"memroute-milvus", "memroute-api-keys", "memroute-postgres"} <= names
    for name in sorted(names):
        assert f"create secret generic {name}" in readme, f"Secret {name} is not created in infra/README.md"
