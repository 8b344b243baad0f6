"""readyq: a database-backed, dependency-aware job scheduler on SQLAlchemy 2.x.

Jobs run when the jobs they depend on are done; workers claim them atomically with a
lease (PostgreSQL and MySQL/MariaDB: ``FOR UPDATE SKIP LOCKED``; SQLite: ``BEGIN
IMMEDIATE``); heartbeats, lease reclaim and timeouts make it crash-safe; a global
concurrency cap set by external limits is shared between groups by weighted fair share.
The database is the only state.
"""

from readyq.errors import (
    ConfigurationError,
    DependencyCycle,
    DependencyNotFound,
    InvalidJob,
    InvalidJobOption,
    InvalidParent,
    InvalidTablePrefix,
    InvalidWeight,
    JobNotFound,
    LeaseLost,
    PayloadNotJSON,
    PayloadTooLarge,
    QueueClosed,
    ReadyqError,
    SchemaNotFound,
    UnknownJobType,
    UnsupportedDatabase,
)
from readyq.model import Job, JobInfo, JobState
from readyq.queue import JobSpec, Queue
from readyq.worker import Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "DependencyCycle",
    "DependencyNotFound",
    "InvalidJob",
    "InvalidJobOption",
    "InvalidParent",
    "InvalidTablePrefix",
    "InvalidWeight",
    "Job",
    "JobInfo",
    "JobNotFound",
    "JobSpec",
    "JobState",
    "LeaseLost",
    "PayloadNotJSON",
    "PayloadTooLarge",
    "Queue",
    "QueueClosed",
    "ReadyqError",
    "SchemaNotFound",
    "UnknownJobType",
    "UnsupportedDatabase",
    "Worker",
    "WorkerStats",
]
