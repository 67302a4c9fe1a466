"""The floors of docs/architecture.md hold for the workspace's real dependency graph.

No server: the table between `<!-- floors: begin` and `<!-- floors: end -->` in docs/architecture.md (one row per
package: floor, package, directory, job) against `cargo metadata --format-version 1 --no-deps`. Normal and build
dependencies on other workspace packages count; dev-dependencies do not (a crate's tests may use a crate above
it), except that `permafrost-cluster` may not use `permafrost-s3` or the CLI package in any way.

`python3 tests/e2e/test_layers.py` prints every package with its floor in the table, the lowest floor its
dependencies allow (1 + the highest floor it uses) and what it uses.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
CLUSTER = "permafrost-cluster"
S3 = "permafrost-s3"
CLI_DIR = "crates/cli"

ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


def parse_floors(text):
    """{package: (floor, directory)} from the marked table; ValueError naming the line for anything malformed."""
    begin = text.find("<!-- floors: begin")
    end = text.find("<!-- floors: end -->")
    if begin < 0 or end < begin:
        raise ValueError("docs/architecture.md has no table between '<!-- floors: begin' and '<!-- floors: end -->'")
    floors = {}
    for line in text[begin:end].splitlines()[1:]:
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        if line.startswith("| floor"):
            continue
        m = ROW.match(line)
        if not m:
            raise ValueError(f"floors table: cannot read the row {line!r} (want | N | `package` | `crates/dir` | job |)")
        floor, package, directory, job = int(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if package in floors:
            raise ValueError(f"floors table: {package} appears twice")
        if not job:
            raise ValueError(f"floors table: {package} has no job")
        floors[package] = (floor, directory)
    if not floors:
        raise ValueError("floors table: no rows")
    return floors


def workspace_graph():
    """{package: {"dir": "crates/x", "uses": {package: set of kinds}}} for the workspace's packages, where kinds
    are "normal", "build" and "dev" and only dependencies on workspace packages are kept."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cargo metadata failed: {out.stderr.strip()}")
    meta = json.loads(out.stdout)
    members = set(meta["workspace_members"])
    packages = [p for p in meta["packages"] if p["id"] in members]
    names = {p["name"] for p in packages}
    graph = {}
    for p in packages:
        uses = {}
        for d in p["dependencies"]:
            if d["name"] in names and d["name"] != p["name"]:
                uses.setdefault(d["name"], set()).add(d.get("kind") or "normal")
        directory = Path(p["manifest_path"]).parent.resolve().relative_to(REPO.resolve()).as_posix()
        graph[p["name"]] = {"dir": directory, "uses": uses}
    return graph


def problems(floors, graph):
    """Every way the table and the graph disagree, one sentence each (empty: the doc is true)."""
    found = []
    for name in sorted(graph):
        if name not in floors:
            found.append(f"{name} ({graph[name]['dir']}) is missing from the floors table of docs/architecture.md")
        elif floors[name][1] != graph[name]["dir"]:
            found.append(f"{name}: the table says {floors[name][1]}, the package is in {graph[name]['dir']}")
    for name in sorted(floors):
        if name not in graph:
            found.append(f"the floors table names {name}, which is not a package of the workspace")
    for name in sorted(graph):
        if name not in floors:
            continue
        floor = floors[name][0]
        for dep, kinds in sorted(graph[name]["uses"].items()):
            if kinds == {"dev"} or dep not in floors:
                continue
            if floors[dep][0] >= floor:
                found.append(
                    f"{name} (floor {floor}) uses {dep} (floor {floors[dep][0]}): a crate may only use crates "
                    f"on lower floors"
                )
    if CLUSTER in graph:
        cli = {n for n, p in graph.items() if p["dir"] == CLI_DIR}
        for dep, kinds in sorted(graph[CLUSTER]["uses"].items()):
            if dep == S3 or dep in cli:
                found.append(
                    f"{CLUSTER} uses {dep} ({', '.join(sorted(kinds))} dependency): the cluster stands below "
                    f"the S3 layer and the CLI"
                )
    return found


def lowest_floors(graph):
    """The floor each package would have with floor = 1 + the highest floor it uses (normal and build edges)."""
    memo = {}

    def floor_of(name, path=()):
        if name in memo:
            return memo[name]
        if name in path:
            raise ValueError("dependency cycle: " + " -> ".join(path + (name,)))
        uses = [d for d, k in graph[name]["uses"].items() if k != {"dev"}]
        memo[name] = 1 + max((floor_of(d, path + (name,)) for d in uses), default=-1)
        return memo[name]

    for name in graph:
        floor_of(name)
    return memo


# ---- the tests ----


def test_every_crate_has_a_floor_and_uses_only_crates_below_it():
    floors = parse_floors(DOC.read_text())
    graph = workspace_graph()
    assert len(graph) >= 22, f"cargo metadata listed only {len(graph)} workspace packages"
    found = problems(floors, graph)
    assert not found, "docs/architecture.md disagrees with the dependency graph:\n" + "\n".join(found)


def test_the_cluster_stands_below_s3_and_the_cli():
    graph = workspace_graph()
    if CLUSTER not in graph:
        return
    floors = parse_floors(DOC.read_text())
    cli = [n for n, p in graph.items() if p["dir"] == CLI_DIR]
    assert cli, "no package in crates/cli"
    assert floors[CLUSTER][0] < floors[S3][0]
    assert floors[CLUSTER][0] < floors[cli[0]][0]
    assert S3 not in graph[CLUSTER]["uses"]
    assert cli[0] not in graph[CLUSTER]["uses"]


def test_the_check_finds_a_wrong_table():
    """The check itself fails on what it is for: a crate left out, a crate on the floor of what it uses, a table
    row for no package, and the cluster using the S3 layer (on a copy of the real graph)."""
    text = DOC.read_text()
    floors = parse_floors(text)
    graph = workspace_graph()
    assert problems(floors, graph) == []

    missing = dict(floors)
    del missing["permafrost-store"]
    assert any("permafrost-store" in p and "missing" in p for p in problems(missing, graph))

    same_floor = dict(floors)
    same_floor["permafrost-store"] = (floors["permafrost-engine"][0], floors["permafrost-store"][1])
    found = problems(same_floor, graph)
    assert any(p.startswith("permafrost-store (floor") and "uses permafrost-engine" in p for p in found), found

    higher = dict(floors)
    higher["permafrost-disk"] = (floors["permafrost-store"][0] + 1, floors["permafrost-disk"][1])
    assert any("uses permafrost-disk" in p for p in problems(higher, graph))

    extra = dict(floors)
    extra["permafrost-nothing"] = (0, "crates/nothing")
    assert any("permafrost-nothing" in p for p in problems(extra, graph))

    wrong_graph = {name: {"dir": p["dir"], "uses": dict(p["uses"])} for name, p in graph.items()}
    wrong_graph.setdefault(CLUSTER, {"dir": "crates/cluster", "uses": {}})
    wrong_graph[CLUSTER]["uses"][S3] = {"dev"}
    with_cluster = dict(floors)
    with_cluster.setdefault(CLUSTER, (5, "crates/cluster"))
    found = problems(with_cluster, wrong_graph)
    assert any(p.startswith(f"{CLUSTER} uses {S3}") for p in found), found

    rows = text.replace("| 4 | `permafrost-store`", "| 4 | permafrost-store")
    try:
        parse_floors(rows)
    except ValueError as e:
        assert "permafrost-store" in str(e)
    else:
        raise AssertionError("a row without backticks was accepted")


def test_the_floors_are_the_lowest_the_graph_allows():
    """floor = 1 + the highest floor among the crates it uses: the table gives no crate a floor higher than it
    needs, so the diagram in the doc is the graph's."""
    floors = parse_floors(DOC.read_text())
    graph = workspace_graph()
    lowest = lowest_floors(graph)
    off = {n: (floors[n][0], lowest[n]) for n in graph if n in floors and floors[n][0] != lowest[n]}
    assert off == {}, f"(table, lowest the graph allows): {off}"


if __name__ == "__main__":
    graph = workspace_graph()
    floors = parse_floors(DOC.read_text())
    lowest = lowest_floors(graph)
    for name in sorted(graph, key=lambda n: (lowest[n], n)):
        uses = ", ".join(
            d + (" (dev)" if k == {"dev"} else "") for d, k in sorted(graph[name]["uses"].items())
        )
        table = floors.get(name, ("-",))[0]
        print(f"{name:24} table {table!s:>2}  lowest {lowest[name]}  uses {uses or '-'}")
    for p in problems(floors, graph):
        print("PROBLEM:", p, file=sys.stderr)
