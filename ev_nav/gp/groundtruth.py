"""The simulated ground truth ``f ~ GP(E_det, k_{G·f+f})`` under the prior of spec §4
(:class:`ev_nav.gp.prior.PriorSettings`).

:func:`prior_kernel` is the composite kernel at those settings. :func:`sample_ground_truth`
draws one function over all segments:

* ``method="exact"`` (default up to :data:`EXACT_MAX_SEGMENTS`): the full covariance matrix and a
  Cholesky factor, i.e. an exact draw.
* ``method="approx"`` (default above): the graph factor is drawn *exactly* through the sparse
  precision, ``g = P^(-ν/2) ξ`` (even ν), and the Matérn feature kernels are replaced by ``D``
  random Fourier features, ``k_f ≈ φᵀφ``; then ``Σ_d φ_d ∘ g_d`` has covariance
  ``K_G ∘ ΦΦᵀ`` exactly. The only errors are the RFF error of the 3-D feature kernels
  (``O(1/√D)``) and the Monte-Carlo estimate of the normaliser ``mean diag P^(-ν)`` (relative error
  ``O(1/√(n D))``); :func:`approx_covariance_error` measures both against the exact kernel.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from numpy.typing import NDArray

from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError
from ev_nav.gp.kernels import GraphMaternKernel, SegmentKernel, SparsePrecision, incidence_laplacian
from ev_nav.gp.numerics import cholesky_jitter_np, fourier_features, student_t_frequencies
from ev_nav.gp.prior import PriorSettings
from ev_nav.roads.network import RoadNetwork

#: Largest network for which the default sampler is the exact dense Cholesky draw.
EXACT_MAX_SEGMENTS = 10_000


def prior_kernel(
    net: RoadNetwork, settings: PriorSettings, mode: str = "auto", **graph_kwargs
) -> SegmentKernel:
    """The composite kernel with the (fixed) hyperparameters of ``settings``."""
    graph = GraphMaternKernel(
        net, nu=settings.graph_nu, kappa=settings.graph_kappa, mode=mode, **graph_kwargs
    )
    return SegmentKernel(
        graph,
        net.features,
        lengthscale=settings.lengthscale,
        product_scale=settings.product_scale,
        feature_scale=settings.feature_scale,
    )


def sample_ground_truth(
    net: RoadNetwork,
    vehicle: Vehicle | None = None,
    settings: PriorSettings | None = None,
    lengthscale: float = 1.0,
    seed: int = 0,
    method: Literal["auto", "exact", "approx"] = "auto",
    n_features: int = 256,
    size: int | None = None,
) -> NDArray[np.float64]:
    """One draw of the true expected energies ``f ~ GP(E_det, k)`` over all segments [Wh].

    Parameters
    ----------
    net : RoadNetwork
    vehicle : Vehicle, optional
        Vehicle for E_det (paper default when omitted).
    settings : PriorSettings, optional
        Prior; default ``PriorSettings.from_network(net, vehicle, lengthscale)``.
    lengthscale : float
        Feature lengthscale, used only when ``settings`` is omitted.
    seed : int
        Seed of the ``numpy.random.Generator`` behind every random number of the draw.
    method : {"auto", "exact", "approx"}
        ``auto`` is exact up to :data:`EXACT_MAX_SEGMENTS` segments.
    n_features : int
        Random Fourier features per feature kernel for ``approx``.
    size : int, optional
        Number of independent draws (the covariance is factorised once); ``None`` for one.

    Returns
    -------
    ndarray of float64, shape (n_segments,), or (size, n_segments) when ``size`` is given
    """
    s = settings or PriorSettings.from_network(net, vehicle, lengthscale)
    rng = np.random.default_rng(seed)
    mean = net.e_det(vehicle)
    if method == "auto":
        method = "exact" if net.n_segments <= EXACT_MAX_SEGMENTS else "approx"
    if method == "exact":
        k = prior_kernel(net, s)
        with torch.no_grad():
            cov = k.cross_all(np.arange(net.n_segments)).numpy()
        # one rung, 1e-10 of the mean prior variance: an exact draw up to a negligible nugget
        chol, _ = cholesky_jitter_np(cov, ladder=(1e-10,), symmetrize=True, error=ConfigError)
        if size is None:
            return mean + chol @ rng.standard_normal(net.n_segments)
        return mean + rng.standard_normal((size, net.n_segments)) @ chol.T
    if method != "approx":
        raise ConfigError(f"unknown sampling method {method!r}; use auto, exact or approx")
    if size is None:
        return mean + _approx_draw(net, s, rng, n_features)
    return mean + np.stack([_approx_draw(net, s, rng, n_features) for _ in range(size)])


def _rff(
    x: NDArray[np.float64], lengthscale: float, n_features: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Random Fourier features of the Matérn-5/2 kernel (unit variance): ``k(x, x') ≈ φ(x)ᵀφ(x')``.

    Frequencies from the Matérn spectral density (:func:`~ev_nav.gp.numerics.
    student_t_frequencies`, ``χ²(5)`` from NumPy), cosine features with random phases.
    """
    d = x.shape[1]
    z = rng.standard_normal((d, n_features))
    u = rng.chisquare(5.0, size=n_features)
    omega = student_t_frequencies(z, u, 5.0, lengthscale)
    b = rng.uniform(0.0, 2.0 * np.pi, size=n_features)
    return fourier_features(x @ omega, 1.0, phases=b)


def _approx_draw(
    net: RoadNetwork, s: PriorSettings, rng: np.random.Generator, n_features: int
) -> NDArray[np.float64]:
    nu = s.graph_nu
    if not (float(nu).is_integer() and int(nu) % 2 == 0):
        raise ConfigError(
            f"the approximate sampler needs an even integer graph nu (got {nu}); use "
            "method='exact' on a network of at most ~10k segments"
        )
    x = net.features
    phi = _rff(x, s.lengthscale, n_features, rng)
    phi2 = _rff(x, s.lengthscale, n_features, rng)
    prec = SparsePrecision(incidence_laplacian(net), 2.0 * nu / s.graph_kappa**2)
    xi = np.asfortranarray(rng.standard_normal((net.n_segments, n_features)))
    g = prec.power_solve(xi, int(nu) // 2)  # columns ~ N(0, P^-ν)
    z_hat = float(np.mean(g * g))  # unbiased estimate of mean diag(P^-ν)
    graph_part = (phi * g).sum(axis=1) / math.sqrt(z_hat)
    feat_part = phi2 @ rng.standard_normal(n_features)
    return math.sqrt(s.product_scale) * graph_part + math.sqrt(s.feature_scale) * feat_part


def approx_covariance_error(
    net: RoadNetwork,
    settings: PriorSettings,
    n_features: int = 256,
    seed: int = 0,
    n_pairs: int = 20_000,
) -> dict[str, float]:
    """Measure the approximate sampler's covariance error against the exact kernel.

    The approximate draw has covariance ``s₁ K_G ∘ ΦΦᵀ / ẑ·z + s₂ Φ'Φ'ᵀ``. This compares it
    entrywise with the exact kernel on ``n_pairs`` random segment pairs (plus the diagonal).
    Needs the exact graph kernel, so use it on networks where that is affordable.

    Returns
    -------
    dict
        ``max_abs_err`` and ``rms_err`` relative to σ0², ``normaliser_rel_err`` (Monte-Carlo
        estimate of mean diag P^-ν with ``n_features`` probes vs exact).
    """
    rng = np.random.default_rng(seed)
    n = net.n_segments
    k = prior_kernel(net, settings, mode="sparse")
    rows = rng.integers(0, n, n_pairs)
    cols = rng.integers(0, n, n_pairs)
    cols[: min(n, n_pairs) // 4] = rows[: min(n, n_pairs) // 4]  # include diagonal entries
    x = net.features
    phi = _rff(x, settings.lengthscale, n_features, rng)
    phi2 = _rff(x, settings.lengthscale, n_features, rng)
    uc, inv = np.unique(cols, return_inverse=True)
    with torch.no_grad():
        kg = k.graph.graph_columns(uc).numpy()[rows, inv]
        exact = k.cross_all(uc).numpy()[rows, inv]  # the paired entries K[rows_i, cols_i]
    prec = SparsePrecision(k.graph.laplacian, 2.0 * settings.graph_nu / settings.graph_kappa**2)
    xi = np.asfortranarray(rng.standard_normal((n, n_features)))
    g = prec.power_solve(xi, int(settings.graph_nu) // 2)
    z_hat = float(np.mean(g * g))
    z = float(k.graph._sparse_state(k.graph.shift()).diag(int(settings.graph_nu)).mean())
    approx = settings.product_scale * kg * (phi[rows] * phi[cols]).sum(1) * (
        z / z_hat
    ) + settings.feature_scale * (phi2[rows] * phi2[cols]).sum(1)
    err = (approx - exact) / settings.outputscale
    return {
        "max_abs_err": float(np.abs(err).max()),
        "rms_err": float(np.sqrt(np.mean(err**2))),
        "normaliser_rel_err": abs(z_hat / z - 1.0),
        "n_features": float(n_features),
    }
