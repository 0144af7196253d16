"""Build order: dependencies first."""

from depgraph.cycles import find_cycle


class CycleError(ValueError):
    def __init__(self, cycle):
        super().__init__("dependency cycle: " + " -> ".join(cycle))
        self.cycle = cycle


def build_order(graph):
    """Every node after its dependencies; among ready nodes, alphabetical (Kahn's algorithm).

    Raises CycleError naming a cycle when there is one.
    """
    remaining = {node: set(graph.dependencies(node)) for node in graph.nodes()}
    order = []
    while remaining:
        ready = sorted(node for node, deps in remaining.items() if not deps)
        if not ready:
            raise CycleError(find_cycle(graph))
        node = ready[0]
        order.append(node)
        del remaining[node]
        for deps in remaining.values():
            deps.discard(node)
    return order
