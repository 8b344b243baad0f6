"""Every module of readyq.web.routes is a group of routes that the app gathers."""

from __future__ import annotations

import pkgutil

from readyq.web import app, routes


def test_every_route_module_is_gathered() -> None:
    modules = {m.name for m in pkgutil.iter_modules(routes.__path__)}
    gathered = {group.__name__.rpartition(".")[2] for group in app.ROUTE_GROUPS}
    assert gathered == modules
    assert all(callable(group.routes) for group in app.ROUTE_GROUPS)
