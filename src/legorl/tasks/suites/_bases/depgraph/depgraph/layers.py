"""Group nodes into layers that can be built in parallel."""

from depgraph.order import build_order


def layers(graph):
    """Layer 0: nodes without dependencies; layer k: nodes whose deepest dependency is in layer k-1."""
    depth = {}
    for node in build_order(graph):
        depth[node] = 1 + max((depth[d] for d in graph.dependencies(node)), default=-1)
    result = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in sorted(depth):
        result[depth[node]].append(node)
    return result
