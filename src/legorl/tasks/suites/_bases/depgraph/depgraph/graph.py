"""A directed graph of dependencies: an edge a -> b means "a depends on b"."""


class Graph:
    def __init__(self):
        self._deps = {}

    def add_node(self, node):
        self._deps.setdefault(node, set())

    def add_edge(self, node, dependency):
        self.add_node(node)
        self.add_node(dependency)
        self._deps[node].add(dependency)

    def nodes(self):
        return sorted(self._deps)

    def dependencies(self, node):
        return sorted(self._deps[node])

    def dependents(self, node):
        return sorted(n for n, deps in self._deps.items() if node in deps)
