from depgraph.graph import Graph


def test_nodes_and_edges():
    g = Graph()
    g.add_edge("app", "lib")
    g.add_edge("app", "utils")
    g.add_edge("lib", "utils")
    assert g.nodes() == ["app", "lib", "utils"]
    assert g.dependencies("app") == ["lib", "utils"]
    assert g.dependents("utils") == ["app", "lib"]
