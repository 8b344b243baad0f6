"""Tests of the ``readyq`` command line, on every database."""
