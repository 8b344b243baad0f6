"""The test application's tasks."""

import asyncio
import time

from django.tasks import task

from shop.models import Order


class Boom(Exception):
    """The failure the failing task raises."""


@task()
def add(a, b):
    return a + b


@task(priority=5, queue_name="emails")
def send_email(address):
    return {"sent": address}


@task()
def fail(message):
    raise Boom(message)


@task(takes_context=True, max_attempts=3)
def flaky(context, succeed_at):
    """Fails until its attempt number reaches ``succeed_at``."""
    if context.attempt < succeed_at:
        raise ValueError(f"attempt {context.attempt}")
    return context.attempt


@task(takes_context=True)
def whoami(context):
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "worker": result.worker_ids[-1],
            "status": str(result.status)}


@task()
async def async_add(a, b):
    await asyncio.sleep(0)
    return a + b


@task()
def record(alias, label):
    """Writes an Order row on database ``alias``; returns its id."""
    return Order.objects.using(alias).create(label=label).pk


@task()
def nap(seconds, alias, label):
    time.sleep(seconds)
    return Order.objects.using(alias).create(label=label).pk


@task(uses={"gpu": 1})
def on_gpu(label):
    return label
