import pytest

from depgraph.graph import Graph
from depgraph.order import CycleError, build_order


def test_build_order():
    g = Graph()
    g.add_edge("app", "lib")
    g.add_edge("lib", "core")
    g.add_edge("tests", "app")
    g.add_node("docs")
    assert build_order(g) == ["core", "docs", "lib", "app", "tests"]


def test_cycle_raises():
    g = Graph()
    g.add_edge("a", "b")
    g.add_edge("b", "a")
    with pytest.raises(CycleError):
        build_order(g)
