"""The Django application of readyq's backend: it carries the ``readyq_worker`` command."""

from __future__ import annotations

from django.apps import AppConfig


class ReadyqConfig(AppConfig):
    name = "readyq.django"
    # "django" (the package's last part) would read as Django's own.
    label = "readyq"
    verbose_name = "readyq"
