import readyq


def test_public_names_are_pinned() -> None:
    assert readyq.__all__ == sorted(readyq.__all__)
    assert readyq.__all__ == [
        "AsyncQueue",
        "ConfigurationError",
        "DependencyCycle",
        "DependencyNotFound",
        "Enqueued",
        "InvalidJob",
        "InvalidJobArgs",
        "InvalidJobOption",
        "InvalidJobResult",
        "InvalidParent",
        "InvalidRateLimit",
        "InvalidTablePrefix",
        "InvalidUniqueKey",
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
        "RateLimit",
        "ReadyqError",
        "SchemaNotFound",
        "UnknownJobType",
        "UnsupportedDatabase",
        "Worker",
        "WorkerOptions",
        "WorkerStats",
    ]


def test_every_error_derives_from_the_one_base() -> None:
    errors = [getattr(readyq, n) for n in readyq.__all__ if n.endswith(("Error", "Found", "Lost",
              "Closed", "Prefix", "Weight", "Parent", "Option", "Cycle", "Type", "JSON",
              "Large", "Database", "Job", "Args", "Result", "Key",
              "Limit"))]
    for err in errors:
        if isinstance(err, type) and issubclass(err, Exception):
            assert issubclass(err, readyq.ReadyqError), err
