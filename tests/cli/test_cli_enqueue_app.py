"""`readyq enqueue --app`: the application's handlers validate what the CLI enqueues."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import readyq

from .support import Run


@pytest.fixture
def model_app(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An application module whose handler validates its args with a pydantic model."""
    name = f"readyq_model_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import pydantic
        import readyq

        class Args(pydantic.BaseModel):
            n: int
            label: str = "none"

        queue = readyq.Queue({db!r})

        @queue.handler("square", args_model=Args)
        def square(job):
            return job.args.n ** 2
    """))
    monkeypatch.chdir(tmp_path)
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:  # the CLI leaves the app's queue open: it is the app's
        module.queue.close()


def test_enqueue_through_the_app_validates_args(
    migrated: Run, mq: readyq.Queue, model_app: str
) -> None:
    cli = migrated
    app = f"{model_app}:queue"
    for argv, message in {
        ("square", "--args", '{"n": "many"}'): "args of job type 'square' do not match Args: n:",
        ("square", "--args", "{}"): "n: Field required",
        ("square",): "(value): Input should be a valid dictionary",
        ("cube", "--args", '{"n": 1}'): "no handler for job type 'cube'",
    }.items():
        failed = cli("enqueue", *argv, "--app", app, url=None)
        assert failed.one_line_error and failed.code == 2, (argv, failed)
        assert message in failed.err, (argv, failed.err)
    assert mq.counts() == {}

    ok = cli("enqueue", "square", "--args", '{"n": "4"}', "--app", app, url=None)
    assert ok.code == 0, ok.err
    assert mq.get(int(ok.out)).args == {"n": 4, "label": "none"}
    noted = cli("enqueue", "square", "--args", '{"n": 5}', "--app", app)
    assert noted.code == 0 and "--db is ignored with --app" in noted.err
    # Without --app the CLI knows no handlers and stores the args as given.
    raw = cli("enqueue", "square", "--args", '{"n": "many"}')
    assert raw.code == 0 and mq.get(int(raw.out)).args == {"n": "many"}


@pytest.fixture
def producer_app(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An application module whose Queue registers no handler (a producer's)."""
    name = f"readyq_producer_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(f"""
        import readyq

        queue = readyq.Queue({db!r})
    """))
    monkeypatch.chdir(tmp_path)
    yield name
    module = sys.modules.pop(name, None)
    if module is not None:
        module.queue.close()


def test_enqueue_through_an_app_refuses_a_type_it_has_no_handler_for(
    migrated: Run, mq: readyq.Queue, model_app: str, producer_app: str
) -> None:
    cli = migrated
    for app, registered in ((f"{producer_app}:queue", "none"), (f"{model_app}:queue", "square")):
        for extra in ([], ["--unique-key", "k1"], ["--after", "1"]):
            failed = cli("enqueue", "nosuchtype", *extra, "--app", app, url=None)
            assert failed.one_line_error and failed.code == 2, (app, extra, failed)
            assert failed.err == (
                f"readyq: no handler for job type 'nosuchtype' in --app {app} "
                f"(registered: {registered}); nothing was enqueued\n"
            )
    assert mq.counts() == {}
    # A container has no handler: its type is free, with or without handlers.
    box = cli("enqueue", "batch", "--container", "--app", f"{producer_app}:queue", url=None)
    assert box.code == 0, box.err
    assert mq.get(int(box.out)).is_container
    # Without --app the CLI knows no handlers and stays permissive.
    loose = cli("enqueue", "nosuchtype")
    assert loose.code == 0 and mq.get(int(loose.out)).type == "nosuchtype"
