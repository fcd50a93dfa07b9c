"""The layered layout computed in a child process equals the in-process one."""

import numpy as np
import pytest

from qtquant.base.errors import QtQuantError
from qtquant.app.scene import child as layout_child
from qtquant.app.scene.layout import LayoutInput, layered_layout


def diamond_chain(n=30):
    sizes, edges = [], []
    for i in range(n):
        sizes += [(120.0, 40.0)] * 4
        a, b, c, d = 4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3
        edges += [(a, b), (a, c), (b, d), (c, d), (a, d)]
        if i:
            edges.append((a - 1, a))
    return LayoutInput(sizes, edges)


def test_child_layout_equals_in_process():
    inp = diamond_chain()
    here, there = layered_layout(inp), layout_child.layered_layout_isolated(inp)
    np.testing.assert_allclose(np.array(there.pos), np.array(here.pos))
    assert there.layers == here.layers
    assert [(r.src, r.dst) for r in there.routes] == [(r.src, r.dst) for r in here.routes]
    for a, b in zip(there.routes, here.routes):
        np.testing.assert_allclose(np.array(a.points), np.array(b.points))
    assert (there.width, there.height, there.crossings) == (here.width, here.height, here.crossings)


def test_child_failure_is_one_line():
    bad = LayoutInput([(1.0, 1.0)], [(0, 5)])  # an edge to a node that does not exist
    with pytest.raises(QtQuantError) as e:
        layout_child.layered_layout_isolated(bad)
    assert "\n" not in str(e.value)
