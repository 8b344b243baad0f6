"""The dashboard mounted in another application that runs behind a path prefix.

Starlette routes a mounted app by ``scope["path"]`` minus ``scope["root_path"]``, and
expects the server to have put the prefix in both (``uvicorn --root-path /app`` does).
An application that sets its prefix itself, as ``FastAPI(root_path="/app")`` does, puts
it in ``root_path`` only: the mount still matches, but every route of the dashboard
below it would answer 404. :class:`RootPathPaths` puts the application's prefix back in
the path first, so that both ways of serving under a prefix work.
"""

from __future__ import annotations

from typing import Any


class RootPathPaths:
    """ASGI middleware: ``path`` gains the application's ``root_path`` when it lacks it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            # The prefix the outermost application was given, which Starlette keeps
            # apart from the mounts' prefixes that follow it in root_path.
            outer = str(scope.get("app_root_path", "")).rstrip("/")
            root = str(scope.get("root_path", ""))
            path = str(scope.get("path", ""))
            if outer and not path.startswith(root) and root.startswith(outer + "/") \
                    and not path.startswith(outer + "/"):
                scope = {**scope, "path": outer + path}
                if "raw_path" in scope and scope["raw_path"] is not None:
                    scope["raw_path"] = outer.encode() + scope["raw_path"]
        await self.app(scope, receive, send)
