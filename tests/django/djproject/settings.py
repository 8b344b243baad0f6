"""The settings of the Django project the backend's tests run: one database alias per
dialect (named by the environment the test session sets), readyq's backend on each."""

import os

SECRET_KEY = "readyq-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["readyq.django", "shop"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ["READYQ_DJANGO_SQLITE"],
    },
    "postgresql": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "USER": "postgres",
        "NAME": "test",
        "OPTIONS": {"options": f"-c search_path={os.environ['READYQ_DJANGO_SCHEMA']}"},
    },
    "mariadb": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "USER": "root",
        "NAME": os.environ["READYQ_DJANGO_SCHEMA"],
    },
}

TASKS = {
    "default": {
        "BACKEND": "readyq.django.ReadyqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "database": os.environ.get("READYQ_DJANGO_DATABASE", "default"),
            "prefix": os.environ.get("READYQ_DJANGO_PREFIX", "readyq_"),
        },
    }
}
