"""`readyq migrate` and `readyq enqueue`, and how the CLI reports user mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

import readyq
from readyq.cli import main
from readyq.migrations import HEAD_REVISION

from .support import Result, Run


def test_migrate_is_idempotent_and_enqueue_prints_ids(cli: Run, db: str) -> None:
    missing = cli("status")
    assert missing.one_line_error and missing.code == 1
    assert "missing" in missing.err or "no SQLite database" in missing.err

    first = cli("migrate")
    assert first.code == 0 and f"none -> {HEAD_REVISION}" in first.out
    again = cli("migrate", "--json")
    assert again.code == 0
    assert again.json() == {"prefix": "readyq_", "previous": HEAD_REVISION,
                            "revision": HEAD_REVISION, "stamped": False}

    a = cli("enqueue", "fetch", "--args", '{"url": "https://example.com", "n": [1, 2]}')
    assert a.code == 0 and a.out.strip().isdigit()
    a_id = int(a.out)
    b = cli("enqueue", "parse", "--after", str(a_id), "--group", "tenant-a", "--weight", "3",
            "--priority", "5", "--max-attempts", "4", "--timeout", "60", "--json")
    assert b.code == 0
    b_json = b.json()
    assert b_json["state"] == "waiting"
    box = int(cli("enqueue", "batch", "--container", "--after", str(b_json["id"])).out)
    child = int(cli("enqueue", "transform", "--parent", str(box), "--run-after", "3600").out)
    later = int(cli("enqueue", "report", "--run-after", "2031-01-01T00:00:00Z").out)
    naive = cli("enqueue", "report", "--run-after", "2031-01-01T00:00:00")
    # A time without a zone is refused: it would mean local time to the user, UTC to us.
    assert naive.code == 2 and "no time zone" in naive.err and not naive.out

    with readyq.Queue(db) as queue:
        fetch = queue.get(a_id)
        assert fetch.args == {"url": "https://example.com", "n": [1, 2]}
        assert fetch.state is readyq.JobState.READY
        parse = queue.get(b_json["id"])
        assert (parse.group, parse.weight, parse.priority, parse.max_attempts) == (
            "tenant-a", 3, 5, 4)
        assert parse.depends_on == (a_id,)
        assert queue.get(box).is_container and queue.get(box).state is readyq.JobState.ACTIVE
        kid = queue.get(child)
        assert kid.parent_id == box and kid.depends_on == (b_json["id"],)
        assert kid.run_after is not None and kid.created_at is not None
        assert 3590 < (kid.run_after - kid.created_at).total_seconds() < 3610
        assert queue.get(later).run_after.year == 2031  # type: ignore[union-attr]
        assert queue.counts() == {"waiting": 2, "ready": 2, "active": 1}  # no naive one


def test_enqueue_with_a_unique_key_prints_the_job_that_holds_it(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    first = cli("enqueue", "report", "--unique-key", "report:2030-01-01", "--json")
    assert first.code == 0
    assert first.json() == {"id": first.json()["id"], "state": "ready", "created": True}
    again = cli("enqueue", "report", "--args", '{"n": 2}', "--unique-key", "report:2030-01-01")
    assert again.code == 0 and int(again.out) == first.json()["id"]
    assert cli("enqueue", "report", "--unique-key", "report:2030-01-01", "--json").json() == {
        "id": first.json()["id"], "state": "ready", "created": False}
    assert mq.counts() == {"ready": 1}
    assert mq.get(first.json()["id"]).unique_key == "report:2030-01-01"


def test_enqueue_and_migrate_mistakes_are_one_line_errors(
    migrated: Run, mq: readyq.Queue
) -> None:
    cli = migrated
    cases = {
        ("enqueue", "x", "--args", "{bad json"): "--args is not valid JSON",
        ("enqueue", "x", "--after", "999"): "do not exist: 999",
        ("enqueue", "x", "--weight", "0"): "weight must be",
        ("enqueue", "x", "--run-after", "tomorrow"): "--run-after 'tomorrow'",
        ("enqueue", "x", "--container", "--priority", "3"): "cannot be used with --container",
        ("enqueue", "x", "--args", "NaN"): "JSON",
        ("enqueue", "x", "--max-attempts", "0"): "max_attempts",
        ("enqueue", "x", "--unique-key", " padded"): "unique_key must not start or end",
        ("enqueue", "x", "--container", "--unique-key", "k"): "cannot be used with --container",
        ("migrate", "--revision", "nope"): "Can't locate revision identified by 'nope'",
    }
    for argv, message in cases.items():
        result = cli(*argv)
        assert result.one_line_error and result.code == 2, (argv, result)
        assert message in result.err, (argv, result.err)
        assert result.out == ""
    plain = mq.enqueue("x", {})
    not_box = cli("enqueue", "y", "--parent", str(plain))
    assert not_box.one_line_error and "not a container" in not_box.err
    assert mq.counts() == {"ready": 1}

    stamped = cli("--prefix", "legacy_", "migrate", "--json")  # a second prefix, fresh
    assert stamped.json()["revision"] == HEAD_REVISION
    with readyq.Queue(mq.engine, prefix="made_") as other:
        other.create_schema()
    refused = cli("migrate", "--prefix", "made_")
    assert refused.one_line_error and refused.code == 1 and "--stamp" in refused.err
    adopted = cli("migrate", "--prefix", "made_", "--stamp")
    assert adopted.code == 0 and f"stamped: none -> {HEAD_REVISION}" in adopted.out
    assert cli("migrate", "--prefix", "made_").out.strip().endswith(
        f"already at revision {HEAD_REVISION}")
    bad_prefix = cli("status", "--prefix", "no-dashes")
    assert bad_prefix.one_line_error and bad_prefix.code == 2 and "prefix" in bad_prefix.err


def test_bad_urls_and_unreachable_servers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("READYQ_DATABASE_URL", raising=False)

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    cases = [
        (("--db", "not a url", "status"), 2, "invalid database URL"),
        (("--db", "oracle://scott@db/x", "status"), 2, "not on 'oracle'"),
        (("--db", "sqlite:///missing/dir/jobs.db", "show", "1"), 1, "no SQLite database"),
        (("status",), 1, "no SQLite database at 'readyq.db'"),
        (("--db", "postgresql+psycopg://postgres@127.0.0.1:1/x", "status"), 1,
         "database error"),
        (("--db", "mysql+pymysql://root@127.0.0.1:1/x", "cancel", "3"), 1, "database error"),
    ]
    for argv, code, message in cases:
        result = run(*argv)
        assert result.one_line_error and result.code == code, (argv, result)
        assert message in result.err, (argv, result.err)
    assert not (tmp_path / "readyq.db").exists()  # reading never creates a database
    monkeypatch.setenv("READYQ_DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    assert run("migrate").code == 0 and (tmp_path / "env.db").exists()
    sql = run("--db", "postgresql+psycopg://u:secret@h/db", "migrate", "--sql", "--prefix", "q_")
    assert sql.code == 0 and "CREATE TABLE q_jobs" in sql.out and "secret" not in sql.out
    with pytest.raises(SystemExit) as usage:
        main(["show", "not-a-number"])
    assert usage.value.code == 2
