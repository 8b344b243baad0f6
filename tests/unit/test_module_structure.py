"""The package's structure: no import cycles between readyq's modules, no unit reading
another module's underscore names, and no test of which database readyq runs on outside
``readyq.dialects`` and the DDL (``readyq.schema``, ``readyq.migrations``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import readyq

PACKAGE = Path(readyq.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(p): ast.parse(p.read_text()) for p in PACKAGE.rglob("*.py")}


def _in_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The readyq modules ``name`` imports, at module level or inside functions, but not
    under ``if TYPE_CHECKING``."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if name in known and (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py"
                                         ).exists() else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if _in_type_checking(node, parents):
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            # The deepest readyq module the name refers to.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, tree, known) for name, tree in modules.items()}
    # A package imports its submodules' parent by definition; only real edges count.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


# Public despite the underscore: namedtuple's and the sqlalchemy Row's methods, os._exit,
# and Enum's sunder names (how a member is made, documented by the enum module).
PUBLIC_UNDERSCORE = {
    "_make", "_replace", "_asdict", "_fields", "_mapping", "_exit", "_name_", "_value_",
}


def test_no_unit_reads_another_objects_underscore_names() -> None:
    """``x._name`` only on ``self``, ``cls`` or ``super()``."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in PUBLIC_UNDERSCORE
            ):
                root = ast.unparse(node.value)
                if root not in ("self", "cls") and not root.startswith("super()"):
                    where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
                    offenders.append(f"{where} {root}.{node.attr}")
    assert offenders == []


DATABASE_TEST = re.compile(
    r"""(\.name|get_backend_name\(\)|dialect\.database)\s*(==|!=|in)\s*[\('"]"""
    r"""|["'](sqlite|postgresql|mysql|mariadb)["']\s*(==|!=|in)"""
)


def test_no_database_name_tests_outside_the_dialects_and_the_ddl() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(("dialects/", "migrations/")) or rel == "schema.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if DATABASE_TEST.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


def test_the_seams_records_are_plain_values() -> None:
    """``readyq.dialects.records`` and the claim's order build no SQL and run nothing:
    they import no SQLAlchemy and, of readyq, only the model and each other (the
    order's rate limits and resources are named in annotations only)."""
    modules = _modules()
    known = set(modules)
    records, order = modules["readyq.dialects.records"], modules["readyq.claim_order"]
    assert _imports("readyq.dialects.records", records, known) <= {
        "readyq.model", "readyq.claim_order",
    }
    for tree in (records, order):
        imported = {a.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for a in node.names}
        imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom)}
        assert "sqlalchemy" not in imported
    runtime = [node for node in order.body if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("readyq")]
    assert runtime == []


def test_sql_builders_do_not_depend_on_the_dialects() -> None:
    """``readyq.sql`` builds statements the dialects complete: it names the seam's
    records in annotations only, so the dialects always import it, never the reverse."""
    modules = _modules()
    offenders = {
        name: sorted(m for m in _imports(name, tree, set(modules))
                     if m.startswith("readyq.dialects"))
        for name, tree in modules.items() if name.startswith("readyq.sql")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# The worker's parts, below the loop (readyq.worker) that assembles them, in layers: a
# part imports only the parts listed after it.
WORKER_PARTS = [
    "readyq.recording",
    "readyq.child_attempts",
    "readyq.attempt_outcomes",
    "readyq.worker_state",
    "readyq.process_signals",
]


def test_the_worker_parts_only_import_downwards() -> None:
    modules = _modules()
    known = set(modules)
    above = {"readyq.worker", "readyq.aio.worker"}
    offenders = []
    for n, name in enumerate(WORKER_PARTS):
        not_below = above | set(WORKER_PARTS[: n + 1])
        wrong = _imports(name, modules[name], known) & (not_below - {name})
        offenders += [f"{name} imports {m}" for m in sorted(wrong)]
    assert offenders == []


def test_job_building_reaches_no_database() -> None:
    """``readyq.building`` turns arguments into records, so that bad input is refused
    before anything touches the database: it imports neither SQLAlchemy nor a readyq
    module that runs statements (the store's records aside)."""
    modules = _modules()
    tree = modules["readyq.building"]
    imported = _imports("readyq.building", tree, set(modules))
    reaching = {
        m for m in imported
        if m.startswith(("readyq.store", "readyq.dialects", "readyq.sql", "readyq.queue",
                         "readyq.aio", "readyq.engines"))
        and m != "readyq.store.records"
    }
    assert reaching == set()
    third_party = {
        alias.name.split(".")[0]
        for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level
    }
    assert "sqlalchemy" not in third_party


# The modules of readyq.cli that commands share; every other one adds and runs commands,
# except the parser that gathers them and the entry point.
CLI_SHARED = {
    f"readyq.cli.{name}"
    for name in ("errors", "connection", "output", "options", "filters", "bulk_actions",
                 "status_view")
}
CLI_TOP = {"readyq.cli", "readyq.cli.__main__", "readyq.cli.entry_point", "readyq.cli.parser"}


def test_cli_commands_use_only_the_shared_cli_modules() -> None:
    """A command module imports no other command module (nor the package, which imports
    them all), the shared modules import no command module, and the rest of readyq
    imports the package, not its modules."""
    modules = _modules()
    known = set(modules)
    offenders = []
    for name, tree in modules.items():
        if name in CLI_TOP:
            continue
        imported = _imports(name, tree, known)
        if name.startswith("readyq.cli."):
            cli_imports = {m for m in imported if m.startswith("readyq.cli")} - CLI_SHARED
        else:
            cli_imports = {m for m in imported if m.startswith("readyq.cli.")}
        offenders += [f"{name} -> {m}" for m in sorted(cli_imports)]
    assert offenders == []
    commands = {n for n in known if n.startswith("readyq.cli.")} - CLI_SHARED - CLI_TOP
    assert len(commands) >= 10  # the test would pass vacuously on a renamed package
