"""Logging defaults for jobs: keep third-party chatter out of the tables people read."""

from __future__ import annotations

import logging

# logger -> level. grpc._server: Milvus Lite's in-process server logs pymilvus' AllocTimestamp
# probe (a method Lite does not implement) as an ERROR on every connect; it is harmless.
QUIET = {
    "bm25s": logging.WARNING,
    "milvus_lite": logging.WARNING,
    "httpx": logging.WARNING,
    "faiss.loader": logging.WARNING,
    "matplotlib": logging.WARNING,
    "grpc._server": logging.CRITICAL,
}


def quiet_third_party_logs() -> None:
    for name, level in QUIET.items():
        logging.getLogger(name).setLevel(level)
