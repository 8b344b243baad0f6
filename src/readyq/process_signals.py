"""Process-wide concerns of a running worker: the stop signals and the frozen heap.

Both act on the whole process, not on one worker: a signal handler is the process's,
and ``gc.freeze()`` covers every object the process holds.
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Workers of this process that keep the heap frozen (see ``frozen_heap``), and whether
# the freeze is theirs.
_freeze_lock = threading.Lock()
_freeze_holders = 0
_freeze_ours = False


@contextmanager
def frozen_heap(enabled: bool = True) -> Iterator[None]:
    """While inside, the objects that existed on entry are left out of the cyclic
    garbage collector's passes (``gc.freeze()``); they are handed back on the way out.

    A worker's per-job objects get promoted to the oldest generation, and each full
    pass would then walk the whole process (modules, SQLAlchemy's caches, the
    application's state); frozen, a pass walks only what came since (measured:
    docs/throughput.md). Process-wide and counted: the first worker in freezes, the
    last out unfreezes; a heap the application froze itself is left as it is.
    """
    global _freeze_holders, _freeze_ours
    if not enabled:
        yield
        return
    with _freeze_lock:
        if _freeze_holders == 0 and gc.get_freeze_count() == 0:
            gc.freeze()
            _freeze_ours = True
        _freeze_holders += 1
    try:
        yield
    finally:
        with _freeze_lock:
            _freeze_holders -= 1
            if _freeze_holders == 0 and _freeze_ours:
                gc.unfreeze()
                _freeze_ours = False


def install_stop_signals(on_stop: Callable[[bool], None]) -> dict[int, Any]:
    """Route SIGTERM and SIGINT to ``on_stop(interrupted)`` (``interrupted``: it was
    SIGINT); return the handlers they replace, for :func:`restore_signals`.

    Only the main thread may set signal handlers: elsewhere nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum: int, frame: Any) -> None:
        on_stop(signum == signal.SIGINT)

    previous: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    return previous


def restore_signals(previous: dict[int, Any]) -> None:
    """Put back the handlers :func:`install_stop_signals` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)
