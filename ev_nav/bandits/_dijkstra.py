"""Point-to-point Dijkstra on a node-weighted CSR graph: one source, interpreted or compiled.

SciPy's ``csgraph.dijkstra`` always settles every reachable node; a trip only needs the path to
one goal. :func:`shortest_path` searches from both ends and stops as soon as no cheaper path can
remain, and never touches the nodes it did not reach: scratch arrays are stamped per call instead
of being reset, so a query costs what it explores, not O(n).

With landmarks (ALT: A*, landmarks, triangle inequality) the same search runs goal-directed: each
connection's cost is reduced by a node potential built from lower-bound distances to and from a
few landmarks, which keeps it ≥ 0 and makes the search settle mostly nodes between the two ends
instead of a disc around each (see :func:`shortest_path`). Without landmarks it is plain
bidirectional Dijkstra.

The function is plain Python that numba can compile unchanged (:func:`compiled`). Both forms do
the same floating-point operations in the same order, so they return the same path, ties
included; only their costs differ. Interpreted, a query on MoST Monaco costs milliseconds;
compiled, tens of microseconds, after importing numba and loading (or, the first time, building)
the cached machine code, which costs a process some 0.3 s. :class:`~ev_nav.bandits.routing.Router`
interprets until that would have paid off (a one-shot ``ev-nav route`` never imports numba) and
then switches to the compiled form.

Costs: entering node ``v`` costs ``weights[v] + floor``; the start's own weight is not counted
(the same convention as the SciPy formulation in :mod:`ev_nav.bandits.routing`, so distances are
the same sums in the same order).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "compiled", "compiled_pareto", "compiled_tree", "counter_uniform", "pareto_labels",
    "shortest_path", "tree_paths",
]


def counter_uniform(key: Any, counter: Any) -> Any:
    """A uniform number in (0, 1) that is a pure function of ``(key, counter)`` (uint64): the
    ``counter + 1``-th output of the splitmix64 generator whose state starts at ``key``, its top
    53 bits centred in their interval (never 0 or 1).

    Plain integer arithmetic that NumPy runs on uint64 arrays (every counter at once) and numba
    compiles for one counter (the router's lazy draws), with the same result bit for bit: unsigned
    multiplication wraps modulo 2⁶⁴ in both, and ``(x >> 11) · 2⁻⁵³ + 2⁻⁵⁴`` is exact in float64.
    """
    x = key + (counter + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)) * 2.0**-53 + 2.0**-54


def shortest_path(
    indptr: Any,
    indices: Any,
    rindptr: Any,
    rindices: Any,
    weights: Any,
    floor: float,
    start: int,
    goal: int,
    dist: Any,
    pred: Any,
    reached: Any,
    stamp: int,
    heap_keys: Any,
    heap_nodes: Any,
    lm_from: Any,
    lm_to: Any,
    n_landmarks: int,
    active: Any,
    query: Any,
    pot: Any,
    pot_start: float,
    pot_goal: float,
    weight_of: Any,
    lower: Any,
    ids: Any,
    mean: Any,
    std: Any,
    score: Any,
    score_of: Any,
    score_key: Any,
    weight_stamp: Any,
    fault: Any,
    prefetching: bool,
) -> np.ndarray:
    """Nodes of a minimum-cost path ``start → goal`` (both included); empty if unreachable.

    Bidirectional: a forward search from ``start`` on ``(indptr, indices)`` and a backward
    search from ``goal`` on the reversed graph ``(rindptr, rindices)``, each time advancing the
    side whose queue has the smaller minimum. ``best`` is the cheapest start–goal path seen
    through any scanned edge whose far end the other search has reached; the search stops once
    the two queue minima add up to at least ``best`` (no cheaper path can remain), which on a
    road network settles about half the nodes a one-sided search settles.

    Goal direction (``len(active) > 0``): both searches run on the reduced costs
    ``c(u → v) − p(u) + p(v)`` with the average potential ``p = (π_goal − π_start) / 2``
    (the same for both sides, so every start–goal path changes by the same constant
    ``p(goal) − p(start)`` and the search above stays exact). ``π_goal(v)`` is the largest
    triangle-inequality lower bound on the cost ``v → goal`` over the ``active`` landmarks,
    ``max(d(L, goal) − d(L, v), d(v, L) − d(goal, L), 0)``, and ``π_start(v)`` the same for
    ``start → v``; ``d`` are costs under per-node lower bounds of the weights, so both are
    consistent (reduced costs ≥ 0) whenever every weight is at least its lower bound — the
    caller's contract. ``lm_from[L n + v] = d(L, v)`` and ``lm_to[L n + v] = d(v, L)`` for the
    ``K = n_landmarks`` landmarks (landmark-major: a query reads only its active landmarks'
    tables, and nearby nodes' entries share cache lines; ``inf`` where there is no path);
    ``query[4 a : 4 a + 4]`` holds ``d(L, start), d(start, L), d(L, goal), d(goal, L)`` of the
    ``a``-th active landmark (all finite), and ``pot_start``/``pot_goal`` the potential at the
    two ends. A node that the landmarks prove cannot lie on a start–goal path is never entered.
    ``pot`` (``n`` entries) caches each reached node's potential; valid where either side's
    ``reached`` is ``stamp``.

    Lazy weights (``weight_of`` not ``None``): ``weights`` is scratch, and a node's weight is
    computed the first time the search needs it, ``lower[v] + weight_of(mean[e] − lower[v],
    std[e], x_e)`` with ``e = ids[v]`` (the caller's number of node ``v``: ``mean``, ``std`` and
    ``score`` are in the caller's order, ``lower`` in the graph's; ``weight_stamp[v] = stamp``
    once done), so a query costs what it explores including the weights. The draw's ``x_e``
    (a score, or what ``weight_of`` takes in its place) is ``score[e]``, or, with ``score_of``
    not ``None``, ``score_of(score_key, e)`` (a counter-based draw, :func:`counter_uniform`:
    only the nodes reached cost one). A weight that is not finite stops the search:
    ``fault[0]`` is set to its node (the graph's number) and the result is empty. With
    ``weight_of`` ``None`` the lazy arguments are not read (numba compiles that case without
    them).

    The arguments are 1-D sequences that support ``len`` and integer indexing: NumPy arrays
    (compiled or interpreted) or Python lists (interpreted, where they index faster). Scratch
    ``dist``, ``pred``, ``reached`` have ``2 n`` entries (forward side first, then backward;
    ``pred`` of the backward side is the next node towards the goal) and the heaps
    ``heap_keys``/``heap_nodes`` ``2 (edges + 1)``. ``reached`` holds a node's state on each
    side, ``2 stamp`` once reached and ``2 stamp + 1`` once settled, where ``stamp`` is larger
    than every earlier call's with these arrays: their entries read as unreached, so nothing is
    reset, and ``dist``/``pred`` are valid where ``reached`` is at least ``2 stamp``. The heaps
    are 4-ary (a node's children lie side by side, and a pop descends half as many levels as
    in a binary heap: on the 1M-segment town a query costs about a tenth less) with lazy
    deletion (a node is pushed again when its distance improves).

    ``prefetching`` (compiled form only): before a node's edges are scanned, the memory they
    will read about each neighbour (its state, distance, potential, landmark costs, weight
    inputs) is requested from the cache hierarchy at once, and so is the next node's after a
    pop, so that those misses overlap instead of stalling one after another (on the 1M-segment
    town a query costs about a quarter less; both measured as in docs/results/README.md, "Speed
    of a trip"). It changes no result.
    """
    n = len(dist) // 2
    cap = len(heap_keys) // 2
    n_active = len(active)
    n_nodes = len(lm_from) // n_landmarks
    inf = np.inf
    mark = 2 * stamp  # a node's state on a side: reached in this call; mark + 1: settled
    size = [1, 1]  # each heap starts with its end node at key 0
    for side in range(2):
        node = start if side == 0 else goal
        dist[side * n + node] = 0.0
        pred[side * n + node] = -1
        reached[side * n + node] = mark
        heap_keys[side * cap] = 0.0
        heap_nodes[side * cap] = node
    if n_active > 0:
        pot[start] = pot_start
        pot[goal] = pot_goal
    best = np.inf
    meet_u = -1  # the path is start → … → meet_u → meet_v → … → goal
    meet_v = -1
    while size[0] > 0 and size[1] > 0:
        if heap_keys[0] + heap_keys[cap] >= best:
            break
        side = 0 if heap_keys[0] <= heap_keys[cap] else 1
        mine = side * n
        theirs = n - mine
        h = side * cap
        # pop the heap's minimum (sift the last entry down from the root)
        key = heap_keys[h]
        node = heap_nodes[h]
        last = size[side] - 1
        size[side] = last
        if last > 0:
            last_key = heap_keys[h + last]
            last_node = heap_nodes[h + last]
            i = 0
            while True:
                child = 4 * i + 1
                if child >= last:
                    break
                # the smallest of (up to) four children
                low = heap_keys[h + child]
                end = child + 4 if child + 4 <= last else last
                for c in range(child + 1, end):
                    if heap_keys[h + c] < low:
                        low = heap_keys[h + c]
                        child = c
                if low >= last_key:
                    break
                heap_keys[h + i] = low
                heap_nodes[h + i] = heap_nodes[h + child]
                i = child
            heap_keys[h + i] = last_key
            heap_nodes[h + i] = last_node
        if prefetching and last > 0:  # the node this side pops next, likely
            top = heap_nodes[h]
            prefetch(reached, mine + top)
            prefetch(dist, mine + top)
            prefetch(indptr if side == 0 else rindptr, top)
            if weight_of is not None and side == 1:
                # a backward scan enters the popped node itself: its weight inputs
                prefetch(weight_stamp, top)
                prefetch(ids, top)
                prefetch(lower, top)
                e = ids[top]
                prefetch(mean, e)
                prefetch(std, e)
        if reached[mine + node] != mark or key > dist[mine + node]:
            continue  # stale entry (settled, or improved since)
        reached[mine + node] = mark + 1
        if side == 0:
            lo, hi = indptr[node], indptr[node + 1]
        else:
            lo, hi = rindptr[node], rindptr[node + 1]
        if prefetching:
            for j in range(lo, hi):
                nxt = indices[j] if side == 0 else rindices[j]
                prefetch(reached, nxt)
                prefetch(reached, n + nxt)
                prefetch(dist, mine + nxt)
                if n_active > 0:
                    prefetch(pot, nxt)
                    for a in range(n_active):
                        prefetch(lm_from, active[a] * n_nodes + nxt)
                        prefetch(lm_to, active[a] * n_nodes + nxt)
                if weight_of is not None and side == 0:
                    # a forward scan enters the neighbour: its weight inputs (the posterior
                    # in the caller's order, found through the neighbour's id)
                    prefetch(weight_stamp, nxt)
                    prefetch(lower, nxt)
                    e = ids[nxt]
                    prefetch(mean, e)
                    prefetch(std, e)
        for j in range(lo, hi):
            nxt = indices[j] if side == 0 else rindices[j]
            # entering a node costs its weight: the head of the original edge u → v
            entered = nxt if side == 0 else node
            if n_active > 0:
                if reached[nxt] < mark and reached[n + nxt] < mark:
                    # first touch of this node in this query: its potential
                    to_goal = 0.0
                    from_start = 0.0
                    for a in range(n_active):
                        at = active[a] * n_nodes + nxt
                        d_from = lm_from[at]  # d(L, nxt)
                        d_to = lm_to[at]  # d(nxt, L)
                        if d_from < inf:
                            bound = query[4 * a + 2] - d_from
                            if bound > to_goal:
                                to_goal = bound
                            bound = d_from - query[4 * a]
                            if bound > from_start:
                                from_start = bound
                        else:
                            from_start = inf  # L reaches start but not nxt
                        if d_to < inf:
                            bound = d_to - query[4 * a + 3]
                            if bound > to_goal:
                                to_goal = bound
                            bound = query[4 * a + 1] - d_to
                            if bound > from_start:
                                from_start = bound
                        else:
                            to_goal = inf  # goal reaches L but nxt does not
                    if to_goal == inf or from_start == inf:
                        pot[nxt] = inf
                    else:
                        pot[nxt] = 0.5 * (to_goal - from_start)
                if pot[nxt] == inf:
                    continue  # on no start–goal path
            if weight_of is not None:
                if weight_stamp[entered] != stamp:
                    e = ids[entered]
                    if score_of is not None:
                        x = score_of(score_key, e)
                    else:
                        x = score[e]
                    value = lower[entered] + weight_of(mean[e] - lower[entered], std[e], x)
                    if not value < inf:  # NaN fails too
                        fault[0] = entered
                        return np.empty(0, dtype=np.int64)
                    weights[entered] = value
                    weight_stamp[entered] = stamp
            step = weights[entered]
            if n_active > 0:
                # reduced cost of the original edge; round-off must not make it negative
                if side == 0:
                    step = step + floor - pot[node] + pot[nxt]
                else:
                    step = step + floor - pot[nxt] + pot[node]
                if step < 0.0:
                    step = 0.0
                cand = key + step
            else:
                cand = key + (step + floor)
            if reached[theirs + nxt] >= mark:
                through = cand + dist[theirs + nxt]
                if through < best:
                    best = through
                    if side == 0:
                        meet_u, meet_v = node, nxt
                    else:
                        meet_u, meet_v = nxt, node
            state = reached[mine + nxt]
            if state > mark:
                continue  # settled
            if state != mark or cand < dist[mine + nxt]:
                dist[mine + nxt] = cand
                pred[mine + nxt] = node
                reached[mine + nxt] = mark
                # push (sift the new entry up from the end)
                i = size[side]
                while i > 0:
                    parent = (i - 1) >> 2
                    if heap_keys[h + parent] <= cand:
                        break
                    heap_keys[h + i] = heap_keys[h + parent]
                    heap_nodes[h + i] = heap_nodes[h + parent]
                    i = parent
                heap_keys[h + i] = cand
                heap_nodes[h + i] = nxt
                size[side] += 1
    if meet_u < 0:
        return np.empty(0, dtype=np.int64)
    head = 1
    node = meet_u
    while node != start:
        node = pred[node]
        head += 1
    tail = 1
    node = meet_v
    while node != goal:
        node = pred[n + node]
        tail += 1
    path = np.empty(head + tail, dtype=np.int64)
    node = meet_u
    for k in range(head - 1, -1, -1):
        path[k] = node
        node = pred[node]
    node = meet_v
    for k in range(head, head + tail):
        path[k] = node
        node = pred[n + node]
    return path


def tree_paths(
    indptr: Any,
    indices: Any,
    weights: Any,
    floor: float,
    start: int,
    targets: Any,
    limit: float,
    dist: Any,
    pred: Any,
    reached: Any,
    settled: Any,
    stamp: int,
    heap_keys: Any,
    heap_nodes: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimum-cost paths from ``start`` to each of ``targets`` (one search, one source).

    Plain Dijkstra that stops once every target is settled or the queue's minimum exceeds
    ``limit``: a few targets near the start cost a few searches' worth of nodes, not the whole
    graph (SciPy's ``csgraph.dijkstra`` settles every reachable node). Costs as in
    :func:`shortest_path` (entering ``v`` costs ``weights[v] + floor``); scratch arrays are
    stamped, never reset.

    Returns
    -------
    flat, offsets, cost
        Target ``i``'s path is ``flat[offsets[i]:offsets[i + 1]]`` (start and target included;
        empty where unreachable within ``limit``); ``cost[i]`` its cost (``inf`` there).
    """
    n_t = len(targets)
    want = 0
    for i in range(n_t):
        t = targets[i]
        if reached[t] != stamp:  # mark targets: settled[] holds -stamp until settled
            reached[t] = stamp
            dist[t] = np.inf
            pred[t] = -1
        settled[t] = -stamp
    for i in range(n_t):
        if settled[targets[i]] == -stamp:
            want += 1
            settled[targets[i]] = -stamp - 1  # counted once
    for i in range(n_t):
        settled[targets[i]] = -stamp
    reached[start] = stamp
    dist[start] = 0.0
    pred[start] = -1
    heap_keys[0] = 0.0
    heap_nodes[0] = start
    size = 1
    while size > 0 and want > 0:
        key = heap_keys[0]
        node = heap_nodes[0]
        if key > limit:
            break
        size -= 1
        if size > 0:  # sift the last entry down from the root
            last_key = heap_keys[size]
            last_node = heap_nodes[size]
            i = 0
            while True:
                child = 2 * i + 1
                if child >= size:
                    break
                if child + 1 < size and heap_keys[child + 1] < heap_keys[child]:
                    child += 1
                if heap_keys[child] >= last_key:
                    break
                heap_keys[i] = heap_keys[child]
                heap_nodes[i] = heap_nodes[child]
                i = child
            heap_keys[i] = last_key
            heap_nodes[i] = last_node
        if settled[node] == stamp or key > dist[node]:
            continue
        if settled[node] == -stamp:
            want -= 1
        settled[node] = stamp
        for e in range(indptr[node], indptr[node + 1]):
            v = indices[e]
            nd = key + weights[v] + floor
            if reached[v] != stamp or nd < dist[v]:
                if reached[v] != stamp:
                    reached[v] = stamp
                    if settled[v] != -stamp:
                        settled[v] = 0
                dist[v] = nd
                pred[v] = node
                i = size  # sift up
                size += 1
                while i > 0:
                    parent = (i - 1) // 2
                    if heap_keys[parent] <= nd:
                        break
                    heap_keys[i] = heap_keys[parent]
                    heap_nodes[i] = heap_nodes[parent]
                    i = parent
                heap_keys[i] = nd
                heap_nodes[i] = v
    lengths = np.zeros(n_t, dtype=np.int64)
    cost = np.full(n_t, np.inf)
    for i in range(n_t):
        t = targets[i]
        if settled[t] == stamp:
            cost[i] = dist[t]
            k = 1
            node = t
            while node != start:
                node = pred[node]
                k += 1
            lengths[i] = k
    offsets = np.zeros(n_t + 1, dtype=np.int64)
    for i in range(n_t):
        offsets[i + 1] = offsets[i] + lengths[i]
    flat = np.empty(offsets[n_t], dtype=np.int64)
    for i in range(n_t):
        node = targets[i]
        for k in range(offsets[i + 1] - 1, offsets[i] - 1, -1):
            flat[k] = node
            node = pred[node]
    return flat, offsets, cost


def pareto_labels(
    indptr: Any,
    indices: Any,
    time_w: Any,
    energy_w: Any,
    start: int,
    energy_limit: float,
    max_labels: int,
    count: Any,
    slots: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Every path from ``start`` that no other path beats in both time and energy (a
    bicriteria label-setting search, Martins' algorithm), up to ``max_labels`` per node.

    Labels are settled in order of time; a new label at a node is kept only if no label there
    is at least as good in both criteria, and removes those it beats. Paths whose energy
    exceeds ``energy_limit`` are not extended. Entering node ``v`` costs ``time_w[v]`` and
    ``energy_w[v]`` (the start's own costs are not counted). ``count`` (n, zeroed) and
    ``slots`` (n × max_labels) are scratch; a node whose list is full keeps what it has, and
    at most ``2 n max_labels`` labels are made in all (the search is then exact only up to
    that many trade-offs).

    Returns
    -------
    node, time, energy, parent, alive, n
        The first ``n`` entries describe the labels (``parent`` −1 at the start); those still
        ``alive`` at a node are its Pareto set; walk ``parent`` for a label's path.
    """
    size_max = max(2 * len(slots), 1)
    lab_node = np.empty(size_max, dtype=np.int64)
    lab_t = np.empty(size_max)
    lab_e = np.empty(size_max)
    lab_parent = np.empty(size_max, dtype=np.int64)
    alive = np.zeros(size_max, dtype=np.bool_)
    heap_t = np.empty(size_max)
    heap_id = np.empty(size_max, dtype=np.int64)
    n_lab = 0
    lab_node[0] = start
    lab_t[0] = 0.0
    lab_e[0] = 0.0
    lab_parent[0] = -1
    alive[0] = True
    slots[start * max_labels] = 0
    count[start] = 1
    n_lab = 1
    heap_t[0] = 0.0
    heap_id[0] = 0
    size = 1
    while size > 0:
        key = heap_t[0]
        lab = heap_id[0]
        size -= 1
        if size > 0:
            last_t = heap_t[size]
            last_id = heap_id[size]
            i = 0
            while True:
                child = 2 * i + 1
                if child >= size:
                    break
                if child + 1 < size and heap_t[child + 1] < heap_t[child]:
                    child += 1
                if heap_t[child] >= last_t:
                    break
                heap_t[i] = heap_t[child]
                heap_id[i] = heap_id[child]
                i = child
            heap_t[i] = last_t
            heap_id[i] = last_id
        if not alive[lab]:
            continue
        node = lab_node[lab]
        e0 = lab_e[lab]
        for k in range(indptr[node], indptr[node + 1]):
            v = indices[k]
            nt = key + time_w[v]
            ne = e0 + energy_w[v]
            if ne > energy_limit or n_lab >= size_max:
                continue
            base = v * max_labels
            dominated = False
            for q in range(count[v]):
                other = slots[base + q]
                if lab_t[other] <= nt and lab_e[other] <= ne:
                    dominated = True
                    break
            if dominated:
                continue
            # drop the labels the new one beats (compact the node's list)
            keep = 0
            for q in range(count[v]):
                other = slots[base + q]
                if nt <= lab_t[other] and ne <= lab_e[other]:
                    alive[other] = False
                else:
                    slots[base + keep] = other
                    keep += 1
            count[v] = keep
            if keep >= max_labels:
                continue
            lab_node[n_lab] = v
            lab_t[n_lab] = nt
            lab_e[n_lab] = ne
            lab_parent[n_lab] = lab
            alive[n_lab] = True
            slots[base + keep] = n_lab
            count[v] = keep + 1
            i = size  # sift up
            size += 1
            while i > 0:
                parent = (i - 1) // 2
                if heap_t[parent] <= nt:
                    break
                heap_t[i] = heap_t[parent]
                heap_id[i] = heap_id[parent]
                i = parent
            heap_t[i] = nt
            heap_id[i] = n_lab
            n_lab += 1
    return lab_node, lab_t, lab_e, lab_parent, alive, n_lab


def compiled_pareto() -> Callable[..., tuple]:
    """:func:`pareto_labels` compiled by numba (machine code cached next to this file)."""
    import numba as nb

    return nb.njit(cache=True, nogil=True)(pareto_labels)


def compiled_tree() -> Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`tree_paths` compiled by numba (machine code cached next to this file)."""
    import numba as nb

    return nb.njit(cache=True, nogil=True)(tree_paths)


def prefetch(array: Any, index: int) -> None:
    """Ask for ``array[index]`` to be brought into the cache (a hint: no effect on results).
    Interpreted, nothing; compiled, the processor's prefetch instruction
    (:func:`_compile_prefetch`)."""


@functools.cache
def _compile_prefetch() -> None:
    """Teach numba :func:`prefetch`: LLVM's prefetch intrinsic (read, keep in all cache levels)
    on the element's address; x86 never faults on a prefetch."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    @intrinsic
    def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            array_type = signature.args[0]
            data = context.make_array(array_type)(context, builder, args[0])
            at = cgutils.get_item_pointer(context, builder, array_type, data, [args[1]],
                                          wraparound=False)
            byte_ptr = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            # named for an i8* argument, as LLVM before opaque pointers needs; later LLVM
            # renames it to its own spelling when it reads the module
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
                "llvm.prefetch.p0i8",
            )
            # read (0), high temporal locality (3), data cache (1)
            builder.call(hint, [builder.bitcast(at, byte_ptr), ir.Constant(i32, 0),
                                ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(array, index), codegen

    @overload(prefetch)
    def _prefetch_overload(array: Any, index: Any) -> Any:
        def impl(array: Any, index: Any) -> None:
            _prefetch(array, index)

        return impl


def compiled() -> Callable[..., np.ndarray]:
    """:func:`shortest_path` compiled by numba (machine code cached next to this file); call it
    with ``prefetching`` true."""
    import numba as nb

    _compile_prefetch()
    return nb.njit(cache=True, nogil=True)(shortest_path)


def truncated_excess() -> tuple[Callable[..., float], Callable[..., float], Callable[..., float]]:
    """Three compiled functions for the kernel's lazy weights: ``(m, s, z) ↦``
    :func:`ev_nav.bandits.indices.truncated_quantile` for one value, ``(m, s, t) ↦``
    :func:`~ev_nav.bandits.indices.truncated_quantile_from_tail` (``t = log Φ(−z)``), and
    ``(key, v) ↦ log(1 − counter_uniform(key, v))``, the ``t`` of the counter-based standard
    normal score ``Φ⁻¹(counter_uniform(key, v))`` (one ``log1p`` where the score and its
    ``log Φ(−z)`` would take ``Φ⁻¹`` and ``log Φ``). They use the same SciPy special functions
    (``scipy.special.cython_special``) in the same order as the vectorised forms, so they give
    the same numbers. They call them through their C addresses, which numba cannot cache, so
    each process compiles them (about a second) the first time they are needed."""
    import ctypes

    import numba as nb
    from numba.extending import get_cython_function_address

    signature = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)
    module = "scipy.special.cython_special"
    ndtri_exp = signature(get_cython_function_address(module, "ndtri_exp"))
    # the double-argument specialisations of the fused log_ndtr and log1p
    log_ndtr = signature(get_cython_function_address(module, "__pyx_fuse_1log_ndtr"))
    log1p = signature(get_cython_function_address(module, "__pyx_fuse_1log1p"))

    @nb.njit
    def from_tail(m: float, s: float, t: float) -> float:
        # like np.maximum(x, 0.0): a NaN stays NaN (the kernel then reports the segment)
        if s > 0.0:
            out = m - s * ndtri_exp(t + log_ndtr(m / s))
            return 0.0 if out < 0.0 else out
        return 0.0 if m < 0.0 else m

    def excess(m: float, s: float, z: float) -> float:
        return from_tail(m, s, log_ndtr(-z))

    uniform = nb.njit(counter_uniform)

    def counter_tail(key: Any, v: int) -> float:
        return log1p(-uniform(key, np.uint64(v)))

    return (nb.cfunc("float64(float64, float64, float64)", cache=False)(excess),
            nb.cfunc("float64(float64, float64, float64)", cache=False)(from_tail.py_func),
            nb.cfunc("float64(uint64, int64)", cache=False)(counter_tail))
