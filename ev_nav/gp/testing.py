"""Small real networks and random routes for GP tests, benchmarks and learning checks.

Not used by the library itself; kept in the package so tests and ``scripts/bench_gp.py`` share one
definition of "a small real network" and "a random route".
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

from ev_nav.energy import ClimateModel
from ev_nav.gp.posterior import SegmentModel
from ev_nav.roads.network import RoadNetwork, build_network
from ev_nav.settings import data_dir

if TYPE_CHECKING:
    from ev_nav.gp.incremental import IncrementalGP
    from ev_nav.gp.independent import BIModel
    from ev_nav.gp.regional import RegionalGP

    #: The learners that take ambient temperatures.
    TemperatureLearner = IncrementalGP | RegionalGP | BIModel

#: The shared data folder (:func:`ev_nav.settings.data_dir`).
DATA_DIR = data_dir()
MONACO_OSM = DATA_DIR / "most_monaco.osm.gz"
LUXEMBOURG_OSM = DATA_DIR / "lust_luxembourg.osm.gz"
CACHE_DIR = Path(tempfile.gettempdir()) / "evnav-gp-cache"


def load_real(path: Path = MONACO_OSM) -> RoadNetwork:
    """Load a real network through the on-disk cache (milliseconds after the first load)."""
    from ev_nav.roads.load import load_osm

    return load_osm(path, cache_dir=CACHE_DIR)


def subnetwork(net: RoadNetwork, n_target: int, seed: int = 0) -> RoadNetwork:
    """The strongly connected part of the segments nearest a random centre (a real sub-town).

    Segments are kept by distance of their midpoint to the centre until ``n_target`` are in; the
    result is then restricted to its largest strongly connected line graph, so it is usually a
    bit smaller than ``n_target``.
    """
    rng = np.random.default_rng(seed)
    mid = net.segment_midpoints()
    centre = mid[rng.integers(net.n_segments)]
    d = np.hypot(mid[:, 0] - centre[0], mid[:, 1] - centre[1])
    keep = np.sort(np.argsort(d)[:n_target])
    nodes, inv = np.unique(np.concatenate([net.seg_u[keep], net.seg_v[keep]]), return_inverse=True)
    su, sv = inv[: keep.size], inv[keep.size :]
    return build_network(
        name=f"{net.name}-sub{n_target}",
        node_lon=net.node_lon[nodes],
        node_lat=net.node_lat[nodes],
        node_elevation=net.node_elevation[nodes],
        node_osmid=net.node_osmid[nodes],
        seg_u=su.astype(np.int64),
        seg_v=sv.astype(np.int64),
        length_m=net.length_m[keep],
        speed_mps=net.speed_mps[keep],
        highway=net.highway[keep],
        highway_classes=net.highway_classes,
        speed_imputed=net.speed_imputed[keep],
        meta={"source_hash": f"{net.content_hash}-sub{n_target}-{seed}"},
    )


def random_route(net: RoadNetwork, length: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """A random walk of ``length`` segments along legal turns (avoiding immediate U-turns)."""
    path = [int(rng.integers(net.n_segments))]
    for _ in range(length - 1):
        e = path[-1]
        succ = net.lg_indices[net.lg_indptr[e] : net.lg_indptr[e + 1]]
        no_uturn = succ[net.seg_v[succ] != net.seg_u[e]]
        path.append(int(rng.choice(no_uturn if no_uturn.size else succ)))
    return np.asarray(path, dtype=np.int64)


def fleet_log(
    net: RoadNetwork, trips: int, seed: int, noise_std: float,
    truth_method: Literal["auto", "exact", "approx"] = "auto",
) -> list[tuple[NDArray[np.int64], NDArray[np.float64]]]:
    """``trips`` random walks of 20–60 segments with per-segment readings [Wh] of a truth drawn
    from the paper's prior (:func:`~ev_nav.gp.groundtruth.sample_ground_truth`, ``seed``,
    ``method=truth_method``) plus noise of sd ``noise_std``; every tenth trip keeps only its
    total (an array of one value)."""
    from ev_nav.gp.groundtruth import sample_ground_truth

    rng = np.random.default_rng(seed)
    truth = sample_ground_truth(net, seed=seed, method=truth_method)
    log = []
    for t in range(trips):
        path = random_route(net, int(rng.integers(20, 61)), rng)
        y = truth[path] + noise_std * rng.standard_normal(path.size)
        log.append((path, y[None].sum(1) if t % 10 == 9 else y))
    return log


def replay(model: SegmentModel, log: list[tuple[NDArray[np.int64], NDArray[np.float64]]]) -> None:
    """Feed a :func:`fleet_log` to a model, one ``update`` or ``update_total`` per trip."""
    for path, y in log:
        if y.size == 1 and path.size > 1:
            model.update_total(path, float(y[0]))
        else:
            model.update(path, y)


def regional_prior_covariance(model: RegionalGP) -> NDArray[np.float64]:
    """The regional learner's own prior covariance, dense (small networks): the Vecchia
    prior's covariance plus ``G Gᵀ`` of its float32 landmarks, in float64."""
    g = model.landmarks.astype(np.float64)
    return model.prior.covariance() + g @ g.T


def temperature_features(
    net: RoadNetwork, e_det: NDArray[np.float64], ids: NDArray[np.int64], t: float
) -> NDArray[np.float64]:
    """φ of readings of segments ``ids`` at ``t`` [°C], written out from the definition (travel
    time [h], traction energy [Wh]) independently of :func:`ev_nav.energy.climate_basis`."""
    c = ClimateModel()
    hours = net.length_m[ids] / net.speed_mps[ids] / 3600.0
    trac = np.maximum(e_det[ids], 0.0)
    heat = max(c.t_heat_c - t, 0.0)
    cool = max(t - c.t_cool_c, 0.0)
    cols = [heat * hours, cool * hours, heat * trac]
    for knot in c.shape_knots_c:
        cols += [max(knot - t, 0.0) * hours, max(knot - t, 0.0) * trac]
    return np.column_stack(cols)


def augmented_rows(
    n: int, ids: NDArray[np.int64], phi: NDArray[np.float64]
) -> list[NDArray[np.float64]]:
    """One row ``[e_i, φ_i]`` of :func:`dense_augmented_posterior`'s design per reading of
    segment ``ids[i]`` with temperature features ``phi[i]``, among ``n`` segments."""
    rows = np.zeros((len(ids), n + phi.shape[1]))
    rows[np.arange(len(ids)), ids] = 1.0
    rows[:, n:] = phi
    return list(rows)


def dense_augmented_posterior(
    prior_cov_g: NDArray[np.float64],
    prior_mean_g: NDArray[np.float64],
    rows: list[NDArray[np.float64]],
    y: list[float],
    noise: list[float],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Posterior mean and covariance of ``[g, β]`` from rows of the augmented design: a dense
    Gaussian computation on ``blockdiag(prior_cov_g, diag τ²)`` (the default climate model's
    coefficient prior), each row ``[h, Σ h φ]`` observed as ``y`` [Wh] with variance
    ``noise`` [Wh²]."""
    c = ClimateModel()
    beta0 = c.coefficients
    n, m = prior_cov_g.shape[0], beta0.size
    k = np.zeros((n + m, n + m))
    k[:n, :n] = prior_cov_g
    scales = [c.heat_w_per_k, c.cool_w_per_k, c.battery_per_k]
    scales += [c.heat_w_per_k, c.battery_per_k] * len(c.shape_knots_c)
    k[n:, n:] = np.diag((c.coefficient_sd * np.array(scales)) ** 2)
    mu0 = np.concatenate([prior_mean_g, beta0])
    h = np.asarray(rows)
    g = h @ k @ h.T + np.diag(noise)
    a = np.linalg.solve(g, h @ k)
    return mu0 + a.T @ (np.asarray(y) - h @ mu0), k - (h @ k).T @ a


def temperature_trips(
    model: TemperatureLearner, net: RoadNetwork, rng: np.random.Generator, n_trips: int = 10
) -> tuple[list[NDArray[np.float64]], list[float], list[float | None]]:
    """Readings and totals at varied temperatures (some without one) in a world unlike the
    climate prior, fed to ``model`` and returned as rows of
    :func:`dense_augmented_posterior` with their values and noise variances (None where the
    model scales its noise per segment)."""
    n = net.n_segments
    e_det = model.prior_mean
    truth = e_det + rng.normal(0.0, 3.0, n)
    rows: list[NDArray[np.float64]] = []
    ys: list[float] = []
    noise: list[float | None] = []
    scale = getattr(model, "noise_scale", None)
    for trip in range(n_trips):
        path = random_route(net, 10, rng)
        path = np.concatenate([path, path[:1]])  # a segment twice in one trip
        t = None if trip == 1 else float(rng.uniform(-10.0, 35.0))
        m = ClimateModel().coefficients.size
        phi = np.zeros((path.size, m)) if t is None else temperature_features(net, e_det, path, t)
        extra = phi[:, :3] @ np.array([150.0, 30.0, 0.01])  # a world unlike the prior
        if trip % 4 == 3:
            total = float((truth[path] + extra).sum() + rng.normal(0.0, 4.0))
            model.update_total(path, total, temperature=t)
            u, cnt = np.unique(path, return_counts=True)
            row = np.zeros(n + m)
            row[u] = cnt
            row[n:] = phi.sum(axis=0)
            rows.append(row)
            ys.append(total)
            noise.append(path.size * model.noise_var if scale is None else None)
        else:
            y = truth[path] + extra + rng.normal(0.0, 2.0, path.size)
            model.update(path, y, temperature=t)
            rows += augmented_rows(n, path, phi)
            ys += [float(v) for v in y]
            noise += [model.noise_var if scale is None else None] * path.size
    return rows, ys, noise


def check_against_dense(
    model: TemperatureLearner,
    net: RoadNetwork,
    prior_cov: NDArray[np.float64],
    rows: list[NDArray[np.float64]],
    ys: list[float],
    noise: list[float | None],
    mean_tol: tuple[float, float] = (1e-7, 1e-7),
    var_tol: tuple[float, float] = (1e-6, 1e-7),
    covariance: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Assert that ``model``'s posterior at four temperatures (marginals, and a route's sum) is
    :func:`dense_augmented_posterior`'s with prior ``prior_cov`` of the latent: means within
    ``mean_tol`` (relative, absolute [Wh]), variances within ``var_tol``; with
    ``covariance`` also three segments' joint covariance. Returns the dense mean and
    covariance of ``[g, β]``."""
    mean, cov = dense_augmented_posterior(prior_cov, model.prior_mean, rows, ys, noise)
    n = net.n_segments
    m = ClimateModel().coefficients.size
    for t in (-12.0, 10.0, 30.0, None):
        phi = (np.zeros((n, m)) if t is None
               else temperature_features(net, model.prior_mean, np.arange(n), t))
        design = np.hstack([np.eye(n), phi])
        post = model.posterior(temperature=t)
        np.testing.assert_allclose(post.mean, design @ mean, rtol=mean_tol[0], atol=mean_tol[1])
        np.testing.assert_allclose(post.std**2, np.einsum("ij,jk,ik->i", design, cov, design),
                                   rtol=var_tol[0], atol=var_tol[1])
        route = np.array([0, 3, 3, 7])
        w = np.array([0.5, 1.0, 1.0, 0.25])
        h = np.zeros(n + m)
        np.add.at(h, route, w)
        h[n:] = w @ phi[route]
        got_mean, got_var = model.predict_sum(route, w, temperature=t)
        np.testing.assert_allclose(got_mean, h @ mean, rtol=mean_tol[0] * 0.1,
                                   atol=mean_tol[1])
        np.testing.assert_allclose(got_var, h @ cov @ h, rtol=var_tol[0], atol=var_tol[1])
        if covariance:
            u = np.array([1, 4, 9])
            np.testing.assert_allclose(model.route_covariance(u, temperature=t),
                                       design[u] @ cov @ design[u].T,
                                       rtol=var_tol[0], atol=var_tol[1])
    return mean, cov
