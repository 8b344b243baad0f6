"""The asyncio API: :class:`AsyncQueue` and its worker, over an AsyncEngine.

It needs the ``async`` extra: SQLAlchemy's asyncio runs readyq's store in greenlets.
"""

from readyq.errors import ConfigurationError

try:
    import greenlet  # type: ignore[import-untyped]  # noqa: F401
except ImportError:
    raise ConfigurationError(
        "readyq.AsyncQueue needs the async extra (greenlet and the asyncio drivers): "
        "pip install 'readyq[async]'"
    ) from None

from readyq.aio.queue import AsyncQueue
from readyq.aio.worker import AsyncWorker

__all__ = ["AsyncQueue", "AsyncWorker"]
