"""Strict JSON for args and results: never pickle, never NaN, bounded size and depth."""

from __future__ import annotations

import json
from json.encoder import c_make_encoder  # type: ignore[attr-defined]
from json.scanner import c_make_scanner  # type: ignore[attr-defined]
from typing import Any

from readyq.errors import PayloadNotJSON, PayloadTooLarge

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_DEPTH = 100


def _depth(value: Any, limit: int) -> int:
    # Iterative so that hostile nesting cannot blow Python's recursion limit.
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One C encoder for every call: json.dumps with non-default options builds a new encoder
# each time, which costs more than encoding a small payload. It keeps no per-call state
# (no circular-reference memory, which threads would share): a payload that contains
# itself recurses until RecursionError, reported as too deep.
_ENCODER = (
    c_make_encoder(None, _not_json, json.encoder.encode_basestring, None, ":", ",",
                   False, False, False)
    if c_make_encoder is not None
    else None
)


def _dumps(value: Any) -> str:
    if _ENCODER is not None:
        return "".join(_ENCODER(value, 0))
    return json.dumps(
        value, allow_nan=False, separators=(",", ":"), ensure_ascii=False, check_circular=False
    )


# The verbs of the messages below, for a plural or a singular subject.
_VERBS = {"args": ("are", "take", "hold"), "result": ("is", "takes", "holds"),
          "state": ("is", "takes", "holds")}


def encode(value: Any, max_bytes: int, what: str = "args") -> str:
    """Encode ``value`` as compact strict JSON, or raise PayloadNotJSON / PayloadTooLarge.

    ``what`` names the value in the messages: ``args`` or ``result``.
    """
    if value is None and max_bytes >= 4:  # what most handlers return
        return "null"
    are, take, hold = _VERBS.get(what, _VERBS["args"])
    try:
        text = _dumps(value)
    except (TypeError, ValueError) as exc:
        raise PayloadNotJSON(f"{what} {are} not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise PayloadNotJSON(
            f"{what} {are} nested deeper than {MAX_DEPTH} levels (or contain themselves)"
        ) from None
    # Each level of nesting takes two characters of the text, so a short text cannot be
    # too deep: only a long one is walked.
    if len(text) > 2 * MAX_DEPTH and _depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise PayloadNotJSON(f"{what} {are} nested deeper than {MAX_DEPTH} levels")
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: not storable as UTF-8 anywhere
            raise PayloadNotJSON(f"{what} {hold} a string that is not valid Unicode") from None
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{what} {take} {size} bytes as JSON, over the limit of {max_bytes}"
        )
    return text


# The C scanner behind json.loads, called directly: json.loads adds two regular
# expression matches (leading and trailing whitespace) and three Python calls around it,
# which cost more than scanning a small payload.
_SCAN = c_make_scanner(json.JSONDecoder()) if c_make_scanner is not None else None


def decode(text: str | None) -> Any:
    """Decode stored JSON (None stays None)."""
    if text is None:
        return None
    if _SCAN is not None and type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:  # leading whitespace, or not JSON: json.loads says which
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


class NotJSON(str):
    """A stored value that is not JSON, as the text it is: what a row written by hand
    (or damaged) may hold. Reads that show jobs return it instead of failing."""

    __slots__ = ()


def decode_stored(text: str | None) -> Any:
    """Decode a value read from a row to be shown: like :func:`decode`, but text that
    is not JSON comes back as :class:`NotJSON` rather than raising."""
    try:
        return decode(text)
    except (ValueError, TypeError, RecursionError):
        return NotJSON(text)
