"""What must be rebuilt when a node changes."""

from depgraph.order import build_order


def affected(graph, node):
    """Every node that depends on node, directly or transitively, in build order."""
    seen = set()
    todo = [node]
    while todo:
        current = todo.pop()
        for dependent in graph.dependents(current):
            if dependent not in seen:
                seen.add(dependent)
                todo.append(dependent)
    return [n for n in build_order(graph) if n in seen]
