"""The test application's own table: tasks write rows to it."""

from django.db import models


class Order(models.Model):
    label = models.CharField(max_length=100)
