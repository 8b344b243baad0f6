"""readyq as a backend of Django's task framework (``django.tasks``, Django 6.0+).

Settings::

    INSTALLED_APPS = [..., "readyq.django"]     # the readyq_worker command
    TASKS = {"default": {"BACKEND": "readyq.django.ReadyqBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"prefix": "readyq_"}}}

Tasks are Django's (``@task``); readyq's own options (dependencies, group and weight,
resources, unique keys, attempts, timeouts) are extras of :class:`ReadyqTask`, given to
``@task(...)`` or ``.using(...)``. Workers run with ``python manage.py readyq_worker``.
See docs/django.md.
"""

from readyq.django.backend import ReadyqBackend
from readyq.django.results import JobEndedError
from readyq.django.tasks import ReadyqTask

__all__ = ["JobEndedError", "ReadyqBackend", "ReadyqTask"]
