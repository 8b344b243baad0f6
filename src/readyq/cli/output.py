"""How commands print: rich consoles that show stored text safely, JSON, and the
formatting of states, ages, times, progress bars and cut-short text."""

from __future__ import annotations

import errno
import functools
import json
import os
from typing import Any

from readyq.reports import ago
from readyq.untrusted import printable

STATE_STYLES = {
    "waiting": "bright_black",
    "ready": "cyan",
    "leased": "yellow",
    "running": "bold yellow",
    "active": "magenta",
    "done": "green",
    "failed": "bold red",
    "cancelled": "bright_black",
    "upstream_failed": "red",
}


@functools.cache
def console_class() -> Any:
    from rich.console import Console

    class PipeConsole(Console):
        """A rich Console that lets a closed pipe reach main(): rich itself would exit
        with status 1, and every command gets the same quiet exit there instead."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

        def render_str(self, text: str, **kwargs: Any) -> Any:
            # Every plain string (a cell, a title) is shown as text: no markup, and no
            # control character reaches the terminal.
            return super().render_str(printable(text), **kwargs)

    return PipeConsole


def make_console(stderr: bool = False) -> Any:
    return console_class()(stderr=stderr, highlight=False, markup=False, emoji=False)


def say(text: str, **kwargs: Any) -> None:
    """``print`` for a line that may hold stored text (a type, a state, an error)."""
    print(printable(text), **kwargs)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def styled(value: object, style: str = "") -> Any:
    from rich.text import Text

    return Text("" if value is None else printable(str(value)), style=style)


def state_text(state: str) -> Any:
    return styled(state, STATE_STYLES.get(state, ""))


def when(epoch: float | None, now: float) -> str:
    from readyq.admin import iso

    if epoch is None:
        return "-"
    delta = now - epoch
    rel = f"{ago(delta)} ago" if delta >= 0 else f"in {ago(-delta)}"
    return f"{iso(epoch)} ({rel})"


# Width of the progress bars of ``show``, ``jobs`` and ``top``, in characters.
BAR_WIDTH = 20


def progress_bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """A bar of ``width`` characters filled to ``fraction`` (blank without one)."""
    if fraction is None:
        return ""
    full = int(fraction * width)
    return "█" * full + "░" * (width - full)


def progress_cell(p: Any, *, width: int = 10) -> Any:
    """A job's progress in one cell: a short bar and ``42%``, or the count reported."""
    from readyq.reports import progress_text

    bar = progress_bar(p.fraction, width)
    return styled(f"{bar} {progress_text(p)}" if bar else progress_text(p), "cyan")


def one_line(text: str | None, limit: int) -> str:
    """User text on one line (newlines and tabs as spaces), cut to ``limit`` characters."""
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_line(text: str | None, limit: int = 60) -> str:
    """The last line of an error (a traceback's ends with the exception), cut short."""
    if not text:
        return ""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def short_json(value: Any, limit: int = 500) -> str:
    from readyq.payload import NotJSON

    if isinstance(value, NotJSON):  # a row written by hand: shown as stored
        text = f"{value} (stored, not JSON)"
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 20] + f"... ({len(text)} chars)"
