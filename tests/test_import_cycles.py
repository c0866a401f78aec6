"""No two modules of the product import each other, directly or through others (a file-level import cycle).

The graph is grimp's (what import-linter checks), which holds every import of a file: the module's own, those
inside functions and those under ``TYPE_CHECKING``. An import moved into a function still closes a cycle here.
"""

from __future__ import annotations

import itertools

import grimp

PACKAGES = ("core", "indexing", "serving", "rl", "prore", "operators")


def strongly_connected_components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the graph's strongly-connected components, each a list of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    components.append(sorted(component))
    return components


def describe_cycle(graph: grimp.ImportGraph, component: list[str]) -> str:
    """One cycle through the component's first module, each step with the line that imports."""
    first = component[0]
    members = set(component)
    nxt = next(m for m in sorted(graph.find_modules_directly_imported_by(first)) if m in members)
    chain = graph.find_shortest_chain(importer=nxt, imported=first)
    assert chain is not None
    path = (first, *chain)
    steps = []
    for importer, imported in itertools.pairwise(path):
        lines = [
            str(d["line_number"]) for d in graph.get_import_details(importer=importer, imported=imported)
        ]
        steps.append(f"  {importer} -> {imported} (line {', '.join(lines)})")
    return f"cycle among {', '.join(component)}:\n" + "\n".join(steps)


def test_no_file_level_import_cycles() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    cycles = [c for c in strongly_connected_components(graph) if len(c) > 1]
    report = "\n".join(describe_cycle(graph, c) for c in cycles)
    print(report)
    assert not cycles, f"{len(cycles)} file-level import cycle(s):\n{report}"
