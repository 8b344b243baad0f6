import readyq


def test_public_names_are_pinned() -> None:
    assert readyq.__all__ == sorted(readyq.__all__)
    assert readyq.__all__ == [
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
        "SchemaNotFound",
        "StuckJob",
        "UnknownJobType",
        "UnknownResource",
        "UnsupportedDatabase",
        "Worker",
        "WorkerOptions",
        "WorkerStats",
    ]


def test_every_error_derives_from_the_one_base() -> None:
    errors = [getattr(readyq, n) for n in readyq.__all__ if n.endswith(("Error", "Found", "Lost",
              "Closed", "Prefix", "Weight", "Parent", "Option", "Cycle", "Type", "JSON",
              "Large", "Database", "Job", "Args", "Result", "Key", "Filter", "Cursor",
              "Limit", "Closable", "Id", "Argument", "InvalidPause", "Step", "State",
              "Progress", "AJob"))]
    for err in errors:
        if isinstance(err, type) and issubclass(err, Exception):
            assert issubclass(err, readyq.ReadyqError), err
