"""The names the code's docstrings and docs/architecture.md cite exist: a renamed or
removed function, class, module, table or file is caught here, not by a reader."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

import readyq
from readyq.schema import build_tables

PACKAGE = Path(readyq.__file__).parent
ROOT = PACKAGE.parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Sphinx roles and double-backquoted dotted names in docstrings.
ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc):`~?\.?([A-Za-z_][\w.]*)`")
LITERAL = re.compile(r"``(readyq(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")


def _resolve(dotted: str, module: Any, owner: Any = None) -> bool:
    """Whether ``dotted`` names something: from the top of its package (``readyq.x``,
    ``sqlalchemy.engine.Engine``), from the class whose docstring cites it, from the
    module that cites it, or from a public readyq name (``Queue.get``)."""
    parts = dotted.split(".")
    for start in (owner, module, readyq, builtins):
        if start is not None and hasattr(start, parts[0]):
            return _walk(getattr(start, parts[0]), parts[1:])
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return _walk(obj, parts[i:])
    return False


def _walk(obj: Any, rest: list[str]) -> bool:
    for name in rest:
        if not hasattr(obj, name):
            # A field without a class-level default is still a name of the class.
            return name in getattr(obj, "__dataclass_fields__", {}) or name in getattr(
                obj, "__annotations__", {})
        obj = getattr(obj, name)
    return True


def _docstrings() -> list[tuple[str, str | None, str]]:
    """(module, class or None, docstring) of every docstring in the package."""
    out: list[tuple[str, str | None, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[:2] in (["readyq", "django"], ["readyq", "migrations"]) or \
                parts[-1] == "__main__":
            # Django's modules need Django, alembic runs the migrations, and importing
            # a __main__ runs the CLI.
            continue
        name = ".".join(parts)

        def visit(node: ast.AST, cls: str | None, name: str = name) -> None:
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    out.append((name, node.name if isinstance(node, ast.ClassDef) else cls,
                                doc))
            for child in ast.iter_child_nodes(node):
                visit(child, node.name if isinstance(node, ast.ClassDef) else cls)

        visit(ast.parse(path.read_text()), None)
    return out


def test_the_names_docstrings_cite_exist() -> None:
    missing = []
    for name, cls, doc in _docstrings():
        module = importlib.import_module(name)
        owner = getattr(module, cls, None) if cls else None
        # A ``readyq.x.y`` literal whose ``readyq.x`` is nothing is not a Python name
        # (a span attribute, a logger's name).
        literals = [c for c in LITERAL.findall(doc) if hasattr(readyq, c.split(".")[1])
                    or _resolve(".".join(c.split(".")[:2]), readyq)]
        for cited in ROLE.findall(doc) + literals:
            if not _resolve(cited, module, owner):
                missing.append(f"{name}: {cited}")
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_names_the_architecture_cites_exist() -> None:
    text = ARCHITECTURE.read_text()
    cited = set(re.findall(r"`([^`\n]+)`", text))
    tables = {t.name.removeprefix("rq_") for t in build_tables("rq_").metadata.sorted_tables}
    missing = []
    for c in sorted(cited):
        if c.startswith("<prefix>"):
            if c[len("<prefix>"):] not in tables | {"alembic_version"}:
                missing.append(c)
        elif re.fullmatch(r"readyq(\.\w+)+", c):
            if not _resolve(c, readyq):
                missing.append(c)
        elif re.fullmatch(r"[A-Z]\w*\.\w+(\(\))?", c):  # Queue.stuck(), JobInfo.error
            if not _resolve(c.removesuffix("()"), readyq):
                missing.append(c)
        elif (re.fullmatch(r"[\w/]+\.(py|md)", c) or re.fullmatch(r"\w+/", c)) and not any(
            (base / c).exists() for base in (ROOT, PACKAGE, ROOT / "src")
        ):
            missing.append(c)
    assert not missing, f"docs/architecture.md cites what does not exist: {missing}"


@pytest.mark.parametrize("good", ["readyq.Queue.get", "readyq.store.claim"])
def test_resolving_finds_what_exists(good: str) -> None:
    assert _resolve(good, readyq)


@pytest.mark.parametrize("bad", ["readyq.Queue.no_such_method", "readyq.no_such_module"])
def test_resolving_misses_what_does_not(bad: str) -> None:
    assert not _resolve(bad, readyq)
