"""django-tasks' no-op task; imported only once ``peer_django.setup`` has run (the task
decorator looks up its backend in Django's settings)."""

from __future__ import annotations

import peer_tasks
from django_tasks import task


@task(queue_name=peer_tasks.QUEUE)
def bench_noop(i: int) -> None:
    """The no-op body, counted."""
    peer_tasks.executed()
