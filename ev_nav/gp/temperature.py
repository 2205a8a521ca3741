"""Ambient temperature in the learners: shared coefficients on temperature features.

A trip's temperature is a context of the trip, not of the road, so it cannot be one more segment
feature of the kernel. The learners model it as a low-rank additive term instead: a reading of
segment ``e`` on a trip at temperature ``T`` is

    y = E_det(e) + φ(T, e)ᵀ β + g(e) + ε,        β ~ N(β₀, diag(τ²)),  g ~ GP(0, k),

with the features ``φ`` of :func:`ev_nav.energy.climate_basis` (heating and cooling degrees ×
the segment's travel time, heating degrees × its traction energy, and the same below each shape
knot) and coefficients ``β`` shared by all segments, their prior centred on the physics model's
(:class:`~ev_nav.energy.ClimateModel`: the shape coefficients on 0). In kernel terms the latent
energy has covariance ``k(e, e') + φ(T, e)ᵀ diag(τ²) φ(T', e')`` over (segment, temperature)
pairs: a winter trip's prediction is learned from winter readings wherever they are and carried
over from summer ones through ``g``, as far as the data allow.

Exact inference without touching the N × N machinery (``docs/temperature.md``): conditional on
the deviation ``δ = β − β₀`` every reading is an ordinary observation of ``g`` (its residual
moved by ``φᵀδ``), so the learner's posterior given ``δ`` has the covariance it already keeps
and a mean affine in ``δ``, ``μ + M δ``. The learner carries ``M`` (N × m) through each rank-k
step with the same gain as ``μ``, and the information its innovations carry about ``δ``
(``A``, ``b``: the log-likelihood is ``−½ δᵀAδ + bᵀδ`` up to a constant). Then

    δ | data ~ N(m, S),  S = (diag(τ⁻²) + A)⁻¹,  m = S b,
    f(e) at T:  mean  μ_e + M_e m + φ(T, e)ᵀ(β₀ + m),
                cov   Σ + (M + Φ_T) S (M + Φ_T)ᵀ,

which is the exact joint posterior of ``(g, β)``; a test checks it against a dense GP on the
augmented covariance (``tests/gp/test_temperature.py``). A learner that never saw a temperature
keeps none of this (``active`` is false) and computes exactly what it did before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.energy import ClimateModel, check_temperature, climate_basis
from ev_nav.errors import ConfigError, ModelStateError
from ev_nav.gp.incremental_state import cholesky, syrk_down
from ev_nav.gp.lapack import trtrs_lower
from ev_nav.roads.network import RoadNetwork


class TemperatureTerm:
    """The temperature coefficients' prior, features and posterior (shared by the learners).

    Parameters
    ----------
    net : RoadNetwork
    e_det : ndarray
        The learner's prior mean per segment [Wh] (its positive part is the traction energy
        the cold-battery feature scales).
    climate : ClimateModel, optional
        The physics prior of the coefficients (its defaults when omitted).
    """

    def __init__(
        self, net: RoadNetwork, e_det: NDArray[np.float64], climate: ClimateModel | None = None
    ) -> None:
        self.climate = climate or ClimateModel()
        self.n = net.n_segments
        self.hours = np.asarray(net.travel_time_s, dtype=np.float64) / 3600.0
        self.traction = np.maximum(np.asarray(e_det, dtype=np.float64), 0.0)
        self.beta0 = self.climate.coefficients
        self.prior_var = (self.climate.coefficient_sd * self.climate.scales) ** 2
        #: number of coefficients (columns of :func:`ev_nav.energy.climate_basis`)
        self.m = int(self.beta0.size)
        #: whether any reading carried a temperature (until then nothing below is used)
        self.active = False
        self.reset_information()

    def start(self, n: int, n_totals: int) -> tuple[
        NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], list[NDArray[np.float64]]
    ]:
        """Become active (a learner's first reading with a temperature) and give the learner's
        statistics of its ``n`` segments and ``n_totals`` trip totals so far, all zero (nothing
        before had a temperature): ``Σφ`` (n × m), ``Σφφᵀ`` (n × m × m), ``Σφr`` (n × m) and
        each total's ``Σhφ`` (m)."""
        self.active = True
        m = self.m
        return (np.zeros((n, m)), np.zeros((n, m, m)), np.zeros((n, m)),
                [np.zeros(m) for _ in range(n_totals)])

    def reset_information(self) -> None:
        """Forget what the data said about the coefficients (``A``, ``b``)."""
        self.info = np.zeros((self.m, self.m))
        self.info_vec = np.zeros(self.m)
        self._coef: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None

    # ------------------------------------------------------------------ features
    def features(self, ids: ArrayLike, temperature_c: ArrayLike | None) -> NDArray[np.float64]:
        """``φ(T, e)`` of readings of segments ``ids`` (k × m); zeros without a temperature
        (the reference conditions: no heating, no cooling)."""
        ids = np.asarray(ids, dtype=np.int64)
        if temperature_c is None:
            return np.zeros((ids.size, self.m))
        t = check_temperature(temperature_c, ids.size)
        return climate_basis(t, self.hours[ids], self.traction[ids], self.climate)

    def offset(self, phi: NDArray[np.float64]) -> NDArray[np.float64]:
        """The prior's temperature energy ``φᵀβ₀`` [Wh] of each row of ``phi``."""
        return phi @ self.beta0

    # ------------------------------------------------------------------ coefficient posterior
    def coefficients(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Posterior mean ``m`` and covariance ``S`` of the deviation ``δ = β − β₀``."""
        if self._coef is None:
            prec = np.diag(1.0 / self.prior_var) + 0.5 * (self.info + self.info.T)
            chol = cholesky(prec)
            inv_l = trtrs_lower(chol, np.eye(self.m))
            cov = inv_l.T @ inv_l
            self._coef = (cov @ self.info_vec, cov)
        return self._coef

    def posterior_coefficients(self) -> dict[str, list[float]]:
        """The coefficients ``β`` (heating and cooling [W/K], battery [1/K], then per shape
        knot heating [W/K] and battery [1/K]): prior and posterior means and sds."""
        m, s = self.coefficients()
        return {
            "prior_mean": self.beta0.tolist(),
            "prior_sd": np.sqrt(self.prior_var).tolist(),
            "mean": (self.beta0 + m).tolist(),
            "sd": np.sqrt(np.clip(np.diag(s), 0.0, None)).tolist(),
        }

    def add_information(
        self, z: NDArray[np.float64], z0: NDArray[np.float64]
    ) -> None:
        """Add whitened innovations: the rows' innovation is ``L(z0 + z δ)`` with ``L Lᵀ`` its
        covariance, so the log-likelihood gains ``−½ δᵀ zᵀz δ − δᵀ zᵀ z0``."""
        self.info += z.T @ z
        self.info_vec -= z.T @ z0
        self._coef = None

    # ------------------------------------------------------------------ read-outs
    def marginals(
        self,
        mean: NDArray[np.float64],
        var: NDArray[np.float64],
        slope: NDArray[np.float64],
        temperature_c: float | None,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Every segment's posterior mean [Wh] and variance [Wh²] at ``temperature_c`` from the
        learner's conditional ones (``mean``, ``var``) and its slope ``M`` (N × m)."""
        m, s = self.coefficients()
        phi = self.features(np.arange(self.n), temperature_c)
        a = slope + phi
        out_mean = mean + slope @ m + phi @ (self.beta0 + m)
        out_var = var + np.einsum("ij,jk,ik->i", a, s, a)
        return out_mean, out_var

    def sum_moments(
        self,
        u: NDArray[np.int64],
        h: NDArray[np.float64],
        mean_sum: float,
        var_sum: float,
        slope: NDArray[np.float64],
        temperature_c: float | None,
    ) -> tuple[float, float]:
        """Mean [Wh] and variance [Wh²] of ``Σ h_e f(e)`` at ``temperature_c`` from its
        conditional moments and the slope ``M``."""
        m, s = self.coefficients()
        psi = h @ self.features(u, temperature_c)
        a = h @ slope[u] + psi
        mean = mean_sum + float(h @ slope[u] @ m) + float(psi @ (self.beta0 + m))
        return mean, var_sum + float(a @ s @ a)

    def route_covariance(
        self,
        u: NDArray[np.int64],
        cov: NDArray[np.float64],
        slope: NDArray[np.float64],
        temperature_c: float | None,
    ) -> NDArray[np.float64]:
        """Joint covariance [Wh²] of segments ``u`` at ``temperature_c`` from the conditional
        one ``cov``."""
        _, s = self.coefficients()
        a = slope[u] + self.features(u, temperature_c)
        return cov + a @ s @ a.T

    def draw(self, rng: np.random.Generator) -> NDArray[np.float64]:
        """One draw of ``δ − m`` from its posterior (``m`` standard normals from ``rng``)."""
        _, s = self.coefficients()
        chol = cholesky(s)
        return chol @ rng.standard_normal(self.m)

    # ------------------------------------------------------------------ persistence
    def state(self) -> dict[str, Any]:
        """The prior (the climate model) as a checkpoint holds it."""
        c = self.climate
        return {"t_heat_c": c.t_heat_c, "t_cool_c": c.t_cool_c,
                "heat_w_per_k": c.heat_w_per_k, "cool_w_per_k": c.cool_w_per_k,
                "battery_per_k": c.battery_per_k, "coefficient_sd": c.coefficient_sd,
                "shape_knots_c": list(c.shape_knots_c)}

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Refuse a checkpoint whose temperature prior differs from this model's."""
        saved = {**dict(state), "shape_knots_c": [float(k) for k in state.get(
            "shape_knots_c", [])]}
        if saved != self.state():
            raise ModelStateError(
                "the checkpoint's temperature model differs from this model's; load it with "
                "the same ClimateModel"
            )


def condition_rows_t(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    slope: NDArray[np.float64],
    term: TemperatureTerm,
    a: NDArray[np.float64],
    m: NDArray[np.float64],
    innov: NDArray[np.float64],
    phi_rows: NDArray[np.float64],
    h_slope: NDArray[np.float64],
) -> None:
    """One exact rank-k step of the temperature-aware learner, in place.

    Rows ``H g + Φ δ`` with ``A = H Σ`` (k × N), ``m = H Σ Hᵀ + R`` (k × k), conditional
    innovation ``innov`` (at ``δ = 0``), ``Φ`` (k × m) and ``H M`` (k × m). With ``m = L Lᵀ``
    and ``W = L⁻¹ A``: ``μ ← μ + Wᵀ L⁻¹ innov``, ``M ← M + Wᵀ L⁻¹ C`` with ``C = −(Φ + H M)``
    (the innovation's slope in ``δ``), ``Σ ← Σ − WᵀW``, and ``A``, ``b`` gain the rows'
    information about ``δ``.
    """
    chol = cholesky(0.5 * (m + m.T))
    w = trtrs_lower(chol, a)
    z0 = trtrs_lower(chol, innov)
    zc = trtrs_lower(chol, -(phi_rows + h_slope))
    mean += w.T @ z0
    slope += w.T @ zc
    syrk_down(cov, w)
    term.add_information(zc, z0)


def within_information(
    phi: NDArray[np.float64],
    r: NDArray[np.float64],
    inv: NDArray[np.int64],
    cnt: NDArray[np.int64],
    noise: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Split readings of the same segments into their per-segment means and what their
    spread says about ``δ`` alone.

    ``phi`` (k × m) and residuals ``r`` of readings grouped by ``inv`` (``cnt`` readings per
    group), each with noise variance ``noise`` [Wh²] (the same within a group). Returns the
    groups' mean features (g × m) and mean residuals, and the information ``(A, b)`` of the
    deviations from the group means: ``Σ (φ−φ̄)(φ−φ̄)ᵀ/v`` and ``Σ (φ−φ̄)(r−r̄)/v``. Exact: the
    readings' likelihood is the groups' means' times this.
    """
    sums = np.zeros((cnt.size, phi.shape[1]))
    np.add.at(sums, inv, phi)
    phi_bar = sums / cnt[:, None]
    r_bar = np.bincount(inv, weights=r, minlength=cnt.size) / cnt
    dphi = phi - phi_bar[inv]
    dr = r - r_bar[inv]
    info = dphi.T @ (dphi / noise[:, None])
    vec = dphi.T @ (dr / noise)
    return phi_bar, r_bar, info, vec


class AtTemperature:
    """A model's read side for trips at one ambient temperature: what planning reads
    (:meth:`posterior`, :meth:`predict_sum`, :meth:`route_covariance`, the noise) at
    ``temperature_c``, so the planning code needs no temperature argument of its own.

    Raises
    ------
    ConfigError
        If the model takes no temperature (the inducing-point learner, or the read-only
        posterior planning restores without the learner: open the learner instead).
    InvalidObservation
        If the temperature is not a number in −60..60 °C.
    """

    def __init__(self, model: Any, temperature_c: float) -> None:
        if getattr(model, "temp", None) is None:
            raise ConfigError(
                f"{type(model).__name__} takes no ambient temperature; the exact and regional "
                "learners and BI do (docs/temperature.md)"
            )
        self.model = model
        self.temperature_c = float(check_temperature(temperature_c))
        self._post: Any = None

    @property
    def checkpoint_kind(self) -> str:
        """The wrapped model's checkpoint kind."""
        return str(self.model.checkpoint_kind)

    @property
    def noise_std(self) -> float:
        """Observation-noise standard deviation ς [Wh]."""
        return float(self.model.noise_std)

    def posterior(self) -> Any:
        """Every segment's posterior at the temperature (computed once per view)."""
        if self._post is None:
            self._post = self.model.posterior(temperature=self.temperature_c)
        return self._post

    def predict_sum(
        self, segment_ids: ArrayLike, weights: ArrayLike | None = None
    ) -> tuple[float, float]:
        """Mean [Wh] and variance [Wh²] of a weighted sum at the temperature."""
        return self.model.predict_sum(segment_ids, weights, temperature=self.temperature_c)

    def route_covariance(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Joint covariance [Wh²] of ``segment_ids`` at the temperature."""
        return self.model.route_covariance(segment_ids, temperature=self.temperature_c)

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed weighted sum (temperature-independent)."""
        return float(self.model.noise_variance(segment_ids, weights))

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one reading of each listed segment."""
        return self.model.noise_variances(segment_ids)


__all__ = ["AtTemperature", "TemperatureTerm", "condition_rows_t",
           "within_information"]
