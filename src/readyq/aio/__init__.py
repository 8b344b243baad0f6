"""The asyncio API: :class:`AsyncQueue` and its worker, over an AsyncEngine."""

from readyq.aio.queue import AsyncQueue
from readyq.aio.worker import AsyncWorker

__all__ = ["AsyncQueue", "AsyncWorker"]
