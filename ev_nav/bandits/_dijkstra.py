"""Compiled point-to-point Dijkstra on a node-weighted CSR graph (numba).

SciPy's ``csgraph.dijkstra`` always settles every reachable node; a trip only needs the path to
one goal. This kernel searches from both ends and stops as soon as no cheaper path can remain,
and never touches the nodes it did not reach: scratch arrays are stamped per call instead of
being reset, so a query costs what it explores, not O(n).

Costs: entering node ``v`` costs ``weights[v] + floor``; the start's own weight is not counted
(the same convention as the SciPy formulation in :mod:`ev_nav.bandits.routing`, so distances are
the same sums in the same order).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numpy.typing import NDArray


@nb.njit(cache=True, nogil=True)
def weights_valid(weights: NDArray[np.float64]) -> bool:  # pragma: no cover - compiled
    """Whether every weight is finite and ≥ 0 (NaN fails)."""
    for x in weights:
        if not (0.0 <= x < np.inf):
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _push(keys, nodes, size, key, node):  # pragma: no cover - compiled
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        nodes[i] = nodes[parent]
        i = parent
    keys[i] = key
    nodes[i] = node
    return size + 1


@nb.njit(cache=True, nogil=True)
def _pop(keys, nodes, size):  # pragma: no cover - compiled
    key = keys[0]
    node = nodes[0]
    size -= 1
    if size > 0:
        last_key = keys[size]
        last_node = nodes[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and keys[child + 1] < keys[child]:
                child += 1
            if keys[child] >= last_key:
                break
            keys[i] = keys[child]
            nodes[i] = nodes[child]
            i = child
        keys[i] = last_key
        nodes[i] = last_node
    return key, node, size


@nb.njit(cache=True, nogil=True)
def shortest_path(
    indptr,
    indices,
    rindptr,
    rindices,
    weights,
    floor,
    start,
    goal,
    dist,
    pred,
    reached,
    settled,
    stamp,
    heap_keys,
    heap_nodes,
):  # pragma: no cover - compiled
    """Nodes of a minimum-cost path ``start → goal`` (both included); empty if unreachable.

    Bidirectional: a forward search from ``start`` on ``(indptr, indices)`` and a backward
    search from ``goal`` on the reversed graph ``(rindptr, rindices)``, each time advancing the
    side whose queue has the smaller minimum. ``best`` is the cheapest start–goal path seen
    through any scanned edge whose far end the other search has reached; the search stops once
    the two queue minima add up to at least ``best`` (no cheaper path can remain), which on a
    road network settles about half the nodes a one-sided search settles.

    Scratch arrays have shape ``(2, n)`` (row 0 forward, row 1 backward; ``pred`` of the
    backward row is the next node towards the goal) and the heaps ``(2, edges + 1)`` (lazy
    deletion: a node is pushed again when its distance improves). An entry is valid only where
    ``reached``/``settled`` equals this call's ``stamp``, a number never used before with these
    arrays, so nothing is reset between calls.
    """
    size = np.zeros(2, dtype=np.int64)
    for side in range(2):
        node = start if side == 0 else goal
        dist[side, node] = 0.0
        pred[side, node] = -1
        reached[side, node] = stamp
        size[side] = _push(heap_keys[side], heap_nodes[side], 0, 0.0, node)
    best = np.inf
    meet_u = -1  # the path is start → … → meet_u → meet_v → … → goal
    meet_v = -1
    while size[0] > 0 and size[1] > 0:
        if heap_keys[0, 0] + heap_keys[1, 0] >= best:
            break
        side = 0 if heap_keys[0, 0] <= heap_keys[1, 0] else 1
        other = 1 - side
        key, node, size[side] = _pop(heap_keys[side], heap_nodes[side], size[side])
        if settled[side, node] == stamp or key > dist[side, node]:
            continue  # stale entry
        settled[side, node] = stamp
        if side == 0:
            lo, hi = indptr[node], indptr[node + 1]
        else:
            lo, hi = rindptr[node], rindptr[node + 1]
        for j in range(lo, hi):
            nxt = indices[j] if side == 0 else rindices[j]
            # entering a node costs its weight: the head of the original edge u → v
            step = weights[nxt] if side == 0 else weights[node]
            cand = key + (step + floor)
            if reached[other, nxt] == stamp:
                through = cand + dist[other, nxt]
                if through < best:
                    best = through
                    meet_u, meet_v = (node, nxt) if side == 0 else (nxt, node)
            if settled[side, nxt] == stamp:
                continue
            if reached[side, nxt] != stamp or cand < dist[side, nxt]:
                dist[side, nxt] = cand
                pred[side, nxt] = node
                reached[side, nxt] = stamp
                size[side] = _push(heap_keys[side], heap_nodes[side], size[side], cand, nxt)
    if meet_u < 0:
        return np.empty(0, dtype=np.int64)
    head = 1
    node = meet_u
    while node != start:
        node = pred[0, node]
        head += 1
    tail = 1
    node = meet_v
    while node != goal:
        node = pred[1, node]
        tail += 1
    path = np.empty(head + tail, dtype=np.int64)
    node = meet_u
    for k in range(head - 1, -1, -1):
        path[k] = node
        node = pred[0, node]
    node = meet_v
    for k in range(head, head + tail):
        path[k] = node
        node = pred[1, node]
    return path
