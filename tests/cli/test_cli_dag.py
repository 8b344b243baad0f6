"""`readyq dag`: the graph around a job as a tree, Mermaid, DOT and JSON."""

from __future__ import annotations

import pytest

import readyq

from .support import Run


def pipeline(queue: readyq.Queue) -> dict[str, int]:
    """fetch -> parse -> batch(container: t1, t2) -> report; other is unrelated."""
    ids: dict[str, int] = {}
    ids["fetch"] = queue.enqueue("fetch", {})
    ids["parse"] = queue.enqueue("parse", {}, depends_on=[ids["fetch"]])
    ids["batch"] = queue.enqueue_container("batch", depends_on=[ids["parse"]])
    ids["t1"] = queue.enqueue("transform", {}, parent=ids["batch"], group="tenant-a")
    ids["t2"] = queue.enqueue("transform", {}, parent=ids["batch"], group="tenant-b")
    ids["report"] = queue.enqueue("report", {}, depends_on=[ids["batch"]])
    ids["other"] = queue.enqueue("other", {})
    return ids


def test_dag_formats_contain_the_edges(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated
    ids = pipeline(mq)
    f, p, b, t1, t2, r = (ids[k] for k in ("fetch", "parse", "batch", "t1", "t2", "report"))

    graph = cli("dag", str(b), "--json").json()
    assert graph["root"] == b
    assert {n["id"] for n in graph["nodes"]} == {f, p, b, t1, t2, r}
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert edges == {
        (f, p, "depends"), (p, b, "depends"), (p, t1, "depends"), (p, t2, "depends"),
        (b, r, "depends"), (b, t1, "contains"), (b, t2, "contains"),
    }
    assert set(graph["upstream"]) == {f, p, t1, t2} and graph["downstream"] == [r]
    assert graph["truncated"] is False

    mermaid = cli("dag", str(b), "--format", "mermaid")
    assert mermaid.code == 0 and mermaid.out.startswith("flowchart TD\n")
    for line in (f"j{f} --> j{p}", f"j{p} --> j{b}", f"j{b} --> j{r}",
                 f"j{b} -. contains .-> j{t1}", f"j{b} -. contains .-> j{t2}",
                 f'j{b}["#{b} batch (container)<br/>active"]', f"style j{b} stroke-width:3px"):
        assert f"    {line}\n" in mermaid.out, line

    dot = cli("dag", str(t1), "--format", "dot")
    assert dot.code == 0 and dot.out.startswith("digraph readyq {")
    for line in (f"j{f} -> j{p};", f"j{p} -> j{t1};", f"j{b} -> j{r};",
                 f'j{b} -> j{t1} [style=dashed, label="contains"];'):
        assert f"    {line}\n" in dot.out, line
    assert f"j{ids['other']}" not in dot.out and f"j{t2} " not in dot.out
    assert "penwidth=3" in dot.out.split(f"j{t1} [", 1)[1].split("\n", 1)[0]

    tree = cli("dag", str(p))
    assert tree.code == 0
    lines = tree.out.splitlines()
    assert lines[0].startswith(f"#{p} parse [waiting]")
    for expected in ("needs (upstream)", f"#{f} fetch [ready]", "needed by (downstream)",
                     f"#{b} batch (container) [active]", f"contains #{t1} transform [waiting]",
                     f"contains #{t2} transform [waiting]", f"#{r} report [waiting]"):
        assert expected in tree.out, expected
    child = cli("dag", str(t1)).out
    assert f"in container #{b} batch (container) [active]" in child
    assert f"#{p} parse [waiting]" in child and f"#{r} report [waiting]" in child
    both = mq.enqueue("both", {}, depends_on=[f, p])
    diamond = cli("dag", str(both)).out
    assert f"#{f} fetch [ready]  default  (shown above)" in diamond

    alone = cli("dag", str(ids["other"]))
    assert "no dependencies, dependents, container or children" in alone.out
    cut = cli("dag", str(b), "--max-nodes", "2", "--json").json()
    assert cut["truncated"] is True and len(cut["nodes"]) == 2
    missing = cli("dag", "31337", "--format", "mermaid")
    assert missing.one_line_error and missing.code == 1 and "no job with id 31337" in missing.err
    too_big = cli("dag", str(b), "--max-nodes", "0")
    assert too_big.one_line_error and too_big.code == 2


def test_a_long_chain_fits_eighty_columns_and_shows_both_ways(
    migrated: Run, mq: readyq.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = mq.enqueue_many([readyq.JobSpec("step", key=f"s{i}",
                                          depends_on=[f"s{i - 1}"] if i else [])
                           for i in range(300)])
    monkeypatch.setenv("COLUMNS", "80")
    out = migrated("dag", str(ids[250])).out
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    # Every job shown is whole on its line, and the tree says where it stops.
    assert all("step" in line for line in lines if "#" in line)
    assert "needs (upstream)" in out and "needed by (downstream)" in out
    assert f"#{ids[251]} step" in out and f"#{ids[249]} step" in out
    assert "more upstream: readyq dag" in out


def test_show_lists_the_first_dependencies_and_counts_the_rest(
    migrated: Run, mq: readyq.Queue
) -> None:
    ups = mq.enqueue_many([readyq.JobSpec("step") for _ in range(130)])
    fan_in = mq.enqueue("step", depends_on=ups)
    out = migrated("show", str(fan_in)).out
    assert "Depends on: 130" in out
    assert "110 more; all: 130 ready" in out
    assert out.count(" step ") <= 21 + 1
    shown = migrated("show", str(fan_in), "--json").json()
    assert len(shown["dependencies"]) == 100 and shown["dependency_states"] == {"ready": 130}


def test_spawned_jobs_are_marked_with_their_spawner(migrated: Run, mq: readyq.Queue) -> None:
    cli = migrated

    @mq.handler("split")
    def split(job: readyq.Job) -> None:
        job.spawn([readyq.JobSpec("part", {"p": p}) for p in range(2)])

    mq.handler("part")(lambda job: None)
    spawner = mq.enqueue("split", {})
    after = mq.enqueue("part", {"p": "after"}, depends_on=[spawner])
    mq.run_worker(until_idle=True, types=["split"], poll_interval=0.02)
    graph = cli("dag", str(after), "--json").json()
    spawned = {n["id"] for n in graph["nodes"] if n["spawned_by"] == spawner}
    assert len(spawned) == 2
    assert {(e["from"], e["to"]) for e in graph["edges"]} >= {(s, after) for s in spawned}
    tree = cli("dag", str(after))
    assert tree.out.count(f"(spawned by #{spawner})") == 2
    shown = cli("show", str(min(spawned)))
    assert f"#{spawner} (its handler added this job)" in shown.out
