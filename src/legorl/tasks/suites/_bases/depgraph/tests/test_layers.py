from depgraph.graph import Graph
from depgraph.impact import affected
from depgraph.layers import layers


def test_layers_simple():
    g = Graph()
    g.add_edge("a", "base")
    g.add_edge("b", "base")
    g.add_node("solo")
    assert layers(g) == [["base", "solo"], ["a", "b"]]


def test_affected_direct():
    g = Graph()
    g.add_edge("app", "lib")
    g.add_edge("tests", "lib")
    assert affected(g, "lib") == ["app", "tests"]
    assert affected(g, "app") == []
