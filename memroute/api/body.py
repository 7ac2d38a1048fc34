"""The raw request body, before any JSON parser sees it: media type, size while it streams in,
nesting depth, then decoding.

A server calls, in order (the Serve ingress does; nothing here needs a web framework):

    check_media_type(headers.get("content-type"))      # 415
    limiter = BodyLimit(limits, headers.get("content-length"))   # 413 from the header alone
    for chunk in stream: limiter.feed(chunk)           # 413 as soon as the limit is passed
    body = decode_json(limiter.body(), limits)         # 400: depth, then invalid JSON

so a 100 MB body is refused after ``max_body_bytes`` have arrived, not after buffering it, and
``[`` x 100,000 is refused by a linear scan, not by the decoder's recursion (a 500 before).
"""

from __future__ import annotations

import json
from typing import Any

from memroute.config.api import ApiLimits
from memroute.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType

_JSON_TYPES = ("application/json",)


def check_media_type(content_type: str | None) -> None:
    """JSON, or no Content-Type at all (curl -d without -H); anything else is a 415."""
    if content_type is None or not content_type.strip():
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in _JSON_TYPES and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"Content-Type {media!r} is not supported; send application/json", field="content-type"
        )


class BodyLimit:
    """Collects a body chunk by chunk, refusing it once it passes ``limits.max_body_bytes``."""

    def __init__(self, limits: ApiLimits, content_length: str | None = None) -> None:
        self.limit = limits.max_body_bytes
        self._chunks: list[bytes] = []
        self.size = 0
        if content_length is not None:
            try:
                declared = int(content_length)
            except ValueError:
                raise InvalidRequest("the Content-Length header is not a number",
                                     field="content-length") from None
            if declared > self.limit:
                raise self._too_large(declared)

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise self._too_large(self.size, at_least=True)
        self._chunks.append(chunk)

    def body(self) -> bytes:
        return b"".join(self._chunks)

    def _too_large(self, n: int, *, at_least: bool = False) -> PayloadTooLarge:
        size = f"over {self.limit}" if at_least else str(n)
        return PayloadTooLarge(f"request body is {size} bytes; the limit is {self.limit}", field="body")


def json_depth(raw: bytes) -> int:
    """Deepest nesting of arrays/objects in ``raw`` (brackets inside strings do not count).
    One pass, no recursion: safe on any input; malformed JSON is the decoder's to refuse."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # closing quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


def decode_json(raw: bytes, limits: ApiLimits) -> Any:
    """The decoded body; 400 naming ``body`` when it nests too deep or is not JSON."""
    opened = raw.count(b"[") + raw.count(b"{")  # fast path: few brackets cannot nest deep
    if opened > limits.max_json_depth and json_depth(raw) > limits.max_json_depth:
        raise InvalidRequest(
            f"the request body nests deeper than {limits.max_json_depth} levels", field="body"
        )
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidRequest("the request body is not valid JSON", field="body") from None
