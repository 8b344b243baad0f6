"""`readyq show` and `readyq dag`: one job, and the dependency graph around it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from readyq.cli.connection import open_queue
from readyq.cli.errors import CLIError
from readyq.cli.options import Subparsers, connection_options, json_option
from readyq.cli.output import (
    STATE_STYLES,
    error_line,
    make_console,
    one_line,
    print_json,
    progress_bar,
    short_json,
    state_text,
    styled,
    when,
)
from readyq.untrusted import printable

# The dependencies and dependents ``readyq show`` lists before it counts the rest.
SHOW_EDGES = 20


def add_show_parser(subparsers: Subparsers) -> None:
    """Add `readyq show` to the subparsers."""
    p = subparsers.add_parser(
        "show",
        parents=[connection_options(), json_option()],
        help="one job: fields, attempts, error, dependencies, dependents",
        description="Everything about one job: its type, state, group, attempts, times, "
        "lease, args, result and last error, the jobs it depends on and the jobs that "
        "depend on it.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the job's id")
    p.set_defaults(run=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    from readyq import admin

    queue = open_queue(args)
    try:
        detail = admin.show(queue, args.id)
    finally:
        queue.close()
    if args.json:
        print_json(detail.to_json())
        return 0
    console = make_console()
    console.print(_fields_table(detail))
    for title, refs, states in (
        ("Depends on", detail.dependencies, detail.dependency_states),
        ("Needed by", detail.dependents, detail.dependent_states),
    ):
        console.print(_edges_table(title, refs, states) if refs else styled(f"{title}: none"))
    if detail.attempts:
        console.print(_attempts_table(detail.attempts, detail.now))
    if detail.steps:
        console.print(_steps_table(detail))
    error = detail.fields["error"]
    if error:
        console.print(styled("Error:", "bold red"))
        console.print(styled(error.rstrip()))
    return 0


def _fields_table(detail: Any) -> Any:
    """The job's fields, one a row, and what its attempts kept."""
    from rich.table import Table

    f, now = detail.fields, detail.now
    table = Table(title=f"Job {f['id']}", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    kind = " (container)" if f["is_container"] else ""
    table.add_row("type", styled(f"{f['type']}{kind}"))
    table.add_row("state", state_text(f["state"]))
    table.add_row("group", styled(f"{f['group']} (weight {f['weight']})"))
    table.add_row("priority", styled(f["priority"]))
    # The rule for every handler setting: a value given at enqueue wins; otherwise the
    # registration of the handler that runs the job decides, when it runs.
    most = f["max_attempts"]
    table.add_row(
        "attempts",
        styled(f"{f['attempts']} of {most}" if most is not None
               else f"{f['attempts']} (the handler's max_attempts decides when it runs)"),
    )
    if not f["is_container"]:
        table.add_row(
            "timeout",
            styled(f"{f['timeout']:g}s (given at enqueue)" if f["timeout"] is not None
                   else "the handler's, if any"),
        )
    if f["is_container"]:
        children = ", ".join(f"{k} {v}" for k, v in detail.children.items())
        table.add_row("children", styled(children or "none"))
    if detail.parent is not None:
        p = detail.parent
        table.add_row("container", styled(f"#{p.id} {p.type} [{p.state}]"))
    for name in ("created_at", "run_after", "started_at", "finished_at", "updated_at"):
        if f[name] is not None:
            table.add_row(name, styled(when(f[name], now)))
    if f["state"] in ("leased", "running"):
        table.add_row(
            "lease",
            styled(
                f"{f['lease_owner']} token {f['lease_token']}, "
                f"expires {when(f['lease_expires'], now)}"
            ),
        )
        table.add_row("heartbeat", styled(when(f["heartbeat_at"], now)))
        if f["cancel_requested"]:
            table.add_row("cancel", styled("requested", "bold red"))
    if f["cancelled_by"]:
        table.add_row("cancelled by", styled(f"an operator ({f['cancelled_by']})"))
    if f["spawned_by"] is not None:
        table.add_row("spawned by", styled(f"#{f['spawned_by']} (its handler added this job)"))
    if not f["is_container"]:
        uses = f["uses"]
        table.add_row(
            "uses",
            styled(
                "the handler's, if any" if uses is None
                else ", ".join(f"{k}={v}" for k, v in sorted(uses.items())) + " (given at enqueue)"
            ),
        )
    for line in detail.waits_for:
        table.add_row("waits for", styled(line, "yellow"))
    table.add_row("args", styled(short_json(f["args"])))
    if f["result"] is not None:
        table.add_row("result", styled(short_json(f["result"])))
    _memory_rows(table, detail)
    return table


def _edges_table(title: str, refs: Any, states: dict[str, int]) -> Any:
    """The first SHOW_EDGES dependencies (or dependents), and the rest counted by state."""
    from rich.table import Table

    total = sum(states.values())
    t = Table(title=f"{title}: {total}" if total > SHOW_EDGES else title, title_justify="left")
    t.add_column("id", justify="right")
    t.add_column("type")
    t.add_column("state")
    for r in refs[:SHOW_EDGES]:
        t.add_row(
            styled(r.id),
            styled(r.type + (" (container)" if r.is_container else "")),
            state_text(r.state),
        )
    if total > SHOW_EDGES:
        per_state = ", ".join(f"{n} {s}" for s, n in states.items())
        t.add_row(styled("..."), styled(f"{total - SHOW_EDGES} more; all: {per_state}",
                                        "bright_black"), styled(""))
    return t


def _attempts_table(attempts: Any, now: float) -> Any:
    from rich.table import Table

    t = Table(title="Attempts", title_justify="left")
    for name in ("#", "worker", "started", "ended", "outcome", "error"):
        t.add_column(name, justify="right" if name == "#" else "left")
    for a in attempts:
        t.add_row(
            styled(a.attempt), styled(a.worker or "-"),
            styled(when(a.started_at, now)), styled(when(a.ended_at, now)),
            state_text(a.outcome) if a.outcome in ("done", "running") else styled(a.outcome),
            styled(error_line(a.error)),
        )
    return t


def _steps_table(detail: Any) -> Any:
    """The steps the job stored: the first ones by name, and how many more."""
    from rich.table import Table

    now, total = detail.now, detail.step_count
    more = total - len(detail.steps)
    t = Table(title=f"Steps: {total}" + (f", the first {len(detail.steps)} by name"
                                          if more else ""), title_justify="left")
    for name in ("step", "stored", "bytes", "attempt"):
        t.add_column(name, justify="right" if name in ("bytes", "attempt") else "left")
    for st in detail.steps:
        t.add_row(styled(st.name), styled(when(st.stored_at, now)),
                  styled(f"{st.size:,}"), styled(st.attempt))
    if more:
        t.add_row(styled(f"... {more} more", "bright_black"), styled(""), styled(""), styled(""))
    return t


def _memory_rows(table: Any, detail: Any) -> None:
    """The rows of ``readyq show`` for what the job's attempts kept: its progress (a
    bar, the count, the message) and its saved state (cut short)."""
    from readyq.reports import progress_text

    now, p = detail.now, detail.progress
    if p is not None:
        bar = progress_bar(p.fraction)
        table.add_row("progress", styled(
            (f"{bar} " if bar else "") + progress_text(p, long=True)
            + ("" if p.updated_at is None
               else f", reported {when(p.updated_at.timestamp(), now)}"), "cyan"))
        if p.message:
            table.add_row("message", styled(one_line(p.message, 200)))
    saved = detail.saved_state
    if saved is not None:
        table.add_row("saved state", styled(short_json(saved.value, 300)))
        table.add_row("state saved", styled(
            f"by attempt {saved.attempt if saved.attempt is not None else '-'}, "
            f"{when(saved.saved_at, now)}, {saved.size:,} bytes"))


def add_dag_parser(subparsers: Subparsers) -> None:
    """Add `readyq dag` to the subparsers."""
    p = subparsers.add_parser(
        "dag",
        parents=[connection_options(), json_option()],
        help="the dependency graph around a job (tree, mermaid or dot)",
        description="Upstream (what the job needs, and the children of "
        "containers), downstream (what it unblocks, and the containers it is "
        "in), as a tree, a Mermaid flowchart or a Graphviz digraph.",
    )
    p.add_argument("id", type=int, metavar="ID", help="the job at the centre of the graph")
    p.add_argument(
        "--format",
        choices=("tree", "mermaid", "dot"),
        default="tree",
        help="a tree in the terminal, a Mermaid flowchart or a Graphviz digraph (default tree)",
    )
    p.add_argument("--max-nodes", type=int, default=200, help="largest graph shown (default 200)")
    p.set_defaults(run=cmd_dag)


def render_tree(g: Any, width: int = 80) -> Any:
    """The graph as a rich tree, as deep as ``width`` columns leave room for a label
    (each level indents by four); deeper branches end with the command that shows them."""
    from rich.tree import Tree

    max_depth = max(2, (width - 36) // 4)

    def label(i: int, relation: str = "") -> Any:
        n = g.nodes[i]
        t = styled(relation, "italic bright_black")
        t.append(printable(f"#{n.id} {n.type}"), style="bold" if i == g.root else "")
        if n.is_container:
            t.append(" (container)", style="magenta")
        if n.spawned_by is not None:
            t.append(f" (spawned by #{n.spawned_by})", style="cyan")
        t.append(" ")
        t.append(printable(f"[{n.state}]"), style=STATE_STYLES.get(n.state, ""))
        t.append(printable(f"  {n.group}"), style="bright_black")
        return t

    def grow(
        branch: Any, i: int, up: bool, seen: set[int], via_container: int | None = None,
        depth: int = 1,
    ) -> None:
        if up:
            members = set(g.upstream)
            # A child repeats its container's dependencies (it inherits them): shown once,
            # under the container.
            inherited = set(g.dependencies_of(via_container)) if via_container else set()
            links = [(d, "") for d in g.dependencies_of(i) if d in members and d not in inherited]
            kids = [c for c in g.children_of(i) if c in members]
        else:
            members = set(g.downstream)
            outs = [d for d in g.dependents_of(i) if d in members]
            # Children of a container that is itself a dependent: shown under it.
            inner = {d for d in outs if g.container_of(d) in outs}
            links = [(d, "") for d in outs if d not in inner]
            parent = g.container_of(i)
            if parent is not None and parent in members and parent != via_container:
                links.append((parent, "in container "))
            kids = [c for c in g.children_of(i) if c in members] if g.nodes[i].is_container else []
        shown = kids[:8]
        links += [(c, "contains ") for c in shown]
        if links and depth >= max_depth:
            branch.add(styled(f"... more {'upstream' if up else 'downstream'}: readyq dag {i}",
                              "bright_black"))
            return
        for j, relation in links:
            if j in seen:
                node = label(j, relation)
                node.append("  (shown above)", style="bright_black")
                branch.add(node)
                continue
            seen.add(j)
            grow(
                branch.add(label(j, relation)), j, up, seen,
                i if relation == "contains " else None, depth + 1,
            )
        if len(kids) > len(shown):
            rest: dict[str, int] = {}
            for c in kids[len(shown) :]:
                rest[g.nodes[c].state] = rest.get(g.nodes[c].state, 0) + 1
            summary = ", ".join(f"{k} {v}" for k, v in sorted(rest.items()))
            branch.add(
                styled(
                    f"... and {len(kids) - len(shown)} more children ({summary})", "bright_black"
                )
            )

    tree = Tree(label(g.root))
    if g.upstream:
        grow(tree.add(styled("needs (upstream)", "bold")), g.root, True, {g.root})
    if g.downstream:
        grow(tree.add(styled("needed by (downstream)", "bold")), g.root, False, {g.root})
    if not g.upstream and not g.downstream:
        tree.add(styled("no dependencies, dependents, container or children", "bright_black"))
    if g.truncated:
        tree.add(styled(f"(graph cut at {len(g.nodes)} jobs: raise --max-nodes)", "yellow"))
    return tree


def cmd_dag(args: argparse.Namespace) -> int:
    from readyq import admin

    if not 1 <= args.max_nodes <= admin.MAX_DAG_NODES:
        raise CLIError(f"--max-nodes must be from 1 to {admin.MAX_DAG_NODES}", code=2)
    queue = open_queue(args)
    try:
        g = admin.dag(queue, args.id, max_nodes=args.max_nodes)
    finally:
        queue.close()
    if args.json:
        print_json(g.to_json())
    elif args.format == "mermaid":
        sys.stdout.write(admin.to_mermaid(g))
    elif args.format == "dot":
        sys.stdout.write(admin.to_dot(g))
    else:
        console = make_console()
        console.print(render_tree(g, console.width))
    return 0
