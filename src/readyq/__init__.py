"""readyq: a database-backed, dependency-aware job scheduler on SQLAlchemy 2.x.

Jobs run when the jobs they depend on are done; workers claim them atomically with a
lease (PostgreSQL and MySQL/MariaDB: ``FOR UPDATE SKIP LOCKED``; SQLite: ``BEGIN
IMMEDIATE``); heartbeats, lease reclaim and timeouts make it crash-safe; a global
concurrency cap set by external limits is shared between groups by weighted fair share.
The database is the only state.
"""

from readyq.config import WorkerOptions
from readyq.errors import (
    ConfigurationError,
    DatabaseFileUnusable,
    DependencyCycle,
    DependencyNotFound,
    InvalidArgument,
    InvalidCursor,
    InvalidFilter,
    InvalidJob,
    InvalidJobArgs,
    InvalidJobId,
    InvalidJobOption,
    InvalidJobResult,
    InvalidParent,
    InvalidPause,
    InvalidProgress,
    InvalidRateLimit,
    InvalidResource,
    InvalidResourceUse,
    InvalidSchedule,
    InvalidState,
    InvalidStep,
    InvalidTablePrefix,
    InvalidUniqueKey,
    InvalidWeight,
    JobNotFound,
    LeaseLost,
    NotClosable,
    NotInAJob,
    PayloadNotJSON,
    PayloadTooLarge,
    QueueClosed,
    ReadyqError,
    ScheduleNotFound,
    SchemaNotFound,
    UnknownJobType,
    UnknownResource,
    UnsupportedDatabase,
)
from readyq.listing import JobFilter
from readyq.model import (
    Enqueued,
    Job,
    JobInfo,
    JobProgress,
    JobSpec,
    JobState,
    Pause,
    ResourceStats,
    ScheduleInfo,
)
from readyq.queue import Queue
from readyq.rate_limits import RateLimit
from readyq.reports import AttemptRecord, BulkResult, JobPage, StuckJob
from readyq.resources import Resource
from readyq.worker import Worker, WorkerStats

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The asyncio API is imported on first use: plain users never load it.
    if name == "AsyncQueue":
        from readyq.aio import AsyncQueue

        return AsyncQueue
    raise AttributeError(f"module 'readyq' has no attribute {name!r}")

__all__ = [
    "AsyncQueue",
    "AttemptRecord",
    "BulkResult",
    "ConfigurationError",
    "DatabaseFileUnusable",
    "DependencyCycle",
    "DependencyNotFound",
    "Enqueued",
    "InvalidArgument",
    "InvalidCursor",
    "InvalidFilter",
    "InvalidJob",
    "InvalidJobArgs",
    "InvalidJobId",
    "InvalidJobOption",
    "InvalidJobResult",
    "InvalidParent",
    "InvalidPause",
    "InvalidProgress",
    "InvalidRateLimit",
    "InvalidResource",
    "InvalidResourceUse",
    "InvalidSchedule",
    "InvalidState",
    "InvalidStep",
    "InvalidTablePrefix",
    "InvalidUniqueKey",
    "InvalidWeight",
    "Job",
    "JobFilter",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobProgress",
    "JobSpec",
    "JobState",
    "LeaseLost",
    "NotClosable",
    "NotInAJob",
    "Pause",
    "PayloadNotJSON",
    "PayloadTooLarge",
    "Queue",
    "QueueClosed",
    "RateLimit",
    "ReadyqError",
    "Resource",
    "ResourceStats",
    "ScheduleInfo",
    "ScheduleNotFound",
    "SchemaNotFound",
    "StuckJob",
    "UnknownJobType",
    "UnknownResource",
    "UnsupportedDatabase",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
]
