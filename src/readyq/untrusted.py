"""Text readyq did not write, made safe for where it goes.

A handler's exception message, a driver's error, a job type or group read from a row
that someone edited by hand: readyq stores such text, logs it and prints it, and none of
it may break the place it lands in.

* :func:`storable`: every database stores it. PostgreSQL refuses NUL in text and no
  database can encode a lone surrogate, so both become visible escapes.
* :func:`one_line`: one field of one log line. Control characters (a newline would
  start a forged log line) become escapes.
* :func:`printable`: safe on a terminal. Escape sequences (clear the screen, set the
  window title, move the cursor) and other control characters become escapes; newlines
  and tabs stay, since tracebacks are multi-line.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the characters that reorder or hide text on a
# terminal (bidirectional overrides and isolates, line and paragraph separators).
_REORDERING = "\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_REORDERING}]")
_CONTROL_BUT_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_REORDERING}]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (which UTF-8 cannot encode)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def has_controls(text: str) -> bool:
    """Whether ``text`` holds a control character (see :func:`one_line`)."""
    return not text.isprintable() and _CONTROL.search(text) is not None


def storable(text: str) -> str:
    """``text`` with NUL and lone surrogates written as escapes (``\\x00``,
    ``\\udc80``): what every database stores. Text without them is returned as is."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if has_surrogates(text):
        text = _SURROGATE.sub(_escape, text)
    return text


def one_line(text: str) -> str:
    """``text`` as one field of a log line: control characters written as escapes."""
    if text.isprintable():
        return text
    return storable(_CONTROL.sub(_escape, text))


def printable(text: str) -> str:
    """``text`` for a terminal: control characters other than newline and tab written as
    escapes, so that nothing in it is taken as a terminal command."""
    if text.isprintable():
        return text
    return storable(_CONTROL_BUT_LAYOUT.sub(_escape, text))
