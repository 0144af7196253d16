"""Cycle detection."""


def find_cycle(graph):
    """A cycle as a list of nodes [a, b, ..., a], or None; searches from the nodes in sorted order."""
    white, grey, black = 0, 1, 2
    color = {node: white for node in graph.nodes()}
    stack = []

    def visit(node):
        color[node] = grey
        stack.append(node)
        for dep in graph.dependencies(node):
            if color[dep] == grey:
                return stack[stack.index(dep):] + [dep]
            if color[dep] == white:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for node in graph.nodes():
        if color[node] == white:
            found = visit(node)
            if found:
                return found
    return None
