"""BI baseline (spec §5.1): an independent conjugate Gaussian per segment.

Prior ``N(E_det(e), σ0²)`` for every segment, known noise ``ς²``; after ``n_e`` observations with
sum ``s_e`` the posterior precision is ``1/σ0² + n_e/ς²`` and the mean
``(E_det/σ0² + s_e/ς²) / precision``. State is the pair (precision, precision-weighted mean),
updated with ``np.add.at`` so repeated segments in one batch are handled exactly.

Ambient temperature (:mod:`ev_nav.gp.temperature`): readings with a temperature share the
coefficients ``β`` across segments. Given ``δ = β − β₀`` each segment is still its own conjugate
Gaussian, with a mean ``(η_e − U_eᵀδ)/λ_e`` affine in ``δ`` (``U_e = Σ φ_i/v_i`` over its
readings); integrating the segments out gives ``δ``'s exact posterior, so per-segment readings
are learned exactly. A trip total with a temperature is learned as BI learns totals (marginals,
correlations dropped) at the coefficients' posterior mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.checkpoints import check_model_header
from ev_nav.energy import ClimateModel, Vehicle, check_temperature
from ev_nav.errors import ConfigError, ModelStateError
from ev_nav.gp.posterior import (
    SegmentPosterior,
    TemperatureArg,
    combine_weights,
    validate_observations,
    validate_reset,
    validate_total,
)
from ev_nav.roads.network import RoadNetwork

_STATE_VERSION = 1


class BIModel:
    """Independent Bayesian Gaussian per segment with known noise.

    Parameters
    ----------
    net : RoadNetwork
    vehicle : Vehicle, optional
        Vehicle for the prior mean E_det (paper default EV when omitted).
    prior_var : float, optional
        Prior variance σ0² [Wh²]; default from :class:`~ev_nav.gp.prior.PriorSettings`
        (0.25² times the variance of E_det over the network).
    noise_var : float, optional
        Observation-noise variance ς² [Wh²]; default 0.1² times the variance of E_det.
    segment_scale : str
        ``"uniform"`` (the paper's) or ``"loss"``: segment ``e`` has prior variance ``σ0² a_e²``
        and noise variance ``ς² a_e²`` with its deterministic loss ``a_e`` [Wh]
        (:func:`ev_nav.potential.loss_scale`); σ0² and ς² are then relative (defaults 0.25² and
        0.2²), as in the exact learner's ``segment_scale``.
    climate : ClimateModel, optional
        The physics prior of the temperature coefficients (used once a reading has a
        temperature).
    """

    #: The ``kind`` its checkpoints carry.
    checkpoint_kind = "bi"

    def __init__(
        self,
        net: RoadNetwork,
        vehicle: Vehicle | None = None,
        prior_var: float | None = None,
        noise_var: float | None = None,
        segment_scale: str = "uniform",
        climate: ClimateModel | None = None,
    ) -> None:
        from ev_nav.gp.incremental_state import SEGMENT_SCALES
        from ev_nav.gp.prior import PriorSettings

        if segment_scale not in SEGMENT_SCALES:
            raise ConfigError(
                f"segment_scale must be one of {', '.join(SEGMENT_SCALES)}, got {segment_scale!r}"
            )
        self.segment_scale = segment_scale
        if segment_scale == "loss":
            from ev_nav.potential import loss_scale

            defaults = PriorSettings.relative()
            #: each segment's variances in units of σ0² and ς² (a_e², or 1 when uniform)
            self.scale2 = loss_scale(net, vehicle) ** 2
        else:
            defaults = PriorSettings.from_network(net, vehicle)
            self.scale2 = np.ones(net.n_segments)
        self.n_segments = net.n_segments
        self.network_hash = net.content_hash
        self.prior_mean = net.e_det(vehicle).astype(np.float64)
        self.prior_var = float(defaults.outputscale if prior_var is None else prior_var)
        self._noise_var = float(defaults.noise_var if noise_var is None else noise_var)
        if not (self.prior_var > 0 and self._noise_var > 0):
            raise ModelStateError("prior_var and noise_var must be positive")
        self.precision = 1.0 / (self.prior_var * self.scale2)
        self.eta = self.prior_mean / (self.prior_var * self.scale2)  # precision-weighted mean
        self.n_obs = np.zeros(self.n_segments, dtype=np.int64)
        self._cache: SegmentPosterior | None = None
        from ev_nav.gp.temperature import TemperatureTerm

        self.temp = TemperatureTerm(net, self.prior_mean, climate)
        # per segment Σ φ/v, Σ φφᵀ/v, Σ φ r/v over readings with a temperature (when active)
        self._u = self._q = self._w = None

    def _activate_temperature(self) -> None:
        if self.temp.active:
            return
        n, m = self.n_segments, self.temp.m
        self.temp.active = True
        self._u = np.zeros((n, m))
        self._q = np.zeros((n, m, m))
        self._w = np.zeros((n, m))

    def _conditional(self) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                    NDArray[np.float64]]:
        """Mean and variance given ``δ = 0`` and the slope ``M = −U/λ``; sets the coefficients'
        information ``A = Σ(Q_e − U_eU_eᵀ/λ_e)``, ``b = Σ(W_e − U_e η_e/λ_e)``."""
        var = 1.0 / self.precision
        slope = -self._u * var[:, None]
        term = self.temp
        term.info = self._q.sum(axis=0) - (self._u * var[:, None]).T @ self._u
        term.info_vec = self._w.sum(axis=0) - self._u.T @ (self.eta * var)
        term._coef = None
        return self.eta * var, var, slope

    @property
    def noise_std(self) -> float:
        """Observation-noise standard deviation ς [Wh]."""
        return float(np.sqrt(self._noise_var))

    def posterior(self, temperature: TemperatureArg = None) -> SegmentPosterior:
        """Posterior means and stds of all segments (on a trip at ``temperature`` [°C])."""
        if temperature is not None or self.temp.active:
            t = None if temperature is None else float(check_temperature(temperature))
            if not self.temp.active:
                mean, var = self.eta / self.precision, 1.0 / self.precision
                slope = np.zeros((self.n_segments, self.temp.m))
            else:
                mean, var, slope = self._conditional()
            mean, var = self.temp.marginals(mean, var, slope, t)
            return SegmentPosterior(mean=mean, std=np.sqrt(var), noise_std=self.noise_std)
        if self._cache is None:
            var = 1.0 / self.precision
            self._cache = SegmentPosterior(
                mean=self.eta * var, std=np.sqrt(var), noise_std=self.noise_std
            )
        return self._cache

    def update(
        self, segment_ids: ArrayLike, energies: ArrayLike, temperature: TemperatureArg = None
    ) -> None:
        """Conjugate update with one noisy observation per listed segment [Wh] (made at
        ``temperature`` [°C], one per trip or per reading)."""
        ids, y = validate_observations(segment_ids, energies, self.n_segments)
        noise = self._noise_var * self.scale2[ids]
        if temperature is not None:
            temps = check_temperature(temperature, ids.size)
            self._activate_temperature()
            phi = self.temp.features(ids, temps)
            y = y - self.temp.offset(phi)
            np.add.at(self._u, ids, phi / noise[:, None])
            np.add.at(self._q, ids, phi[:, :, None] * phi[:, None, :] / noise[:, None, None])
            np.add.at(self._w, ids, phi * (y / noise)[:, None])
        np.add.at(self.precision, ids, 1.0 / noise)
        np.add.at(self.eta, ids, y / noise)
        np.add.at(self.n_obs, ids, 1)
        self._cache = None

    def update_total(
        self,
        segment_ids: ArrayLike,
        total_energy: float,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> None:
        """Update from the trip total ``y = Σ_e h_e f_e + noise`` (noise variance ``ς² Σ h``;
        ``h`` counts repeats and the driven share of partly driven segments, see
        :func:`~ev_nav.gp.posterior.validate_total`).

        The marginals are updated exactly (Gaussian conditioning on a sum); the correlations the
        observation induces between the trip's segments are dropped, since BI keeps independent
        segments.
        """
        uniq, h, total = validate_total(segment_ids, total_energy, self.n_segments, weights)
        if temperature is not None or self.temp.active:
            # at the coefficients' posterior mean δ̂: f_e's mean there is (η_e − U_eᵀδ̂)/λ_e
            t = None if temperature is None else float(check_temperature(temperature))
            self._activate_temperature()
            self._conditional()  # sets the coefficients' information
            d = self.temp.coefficients()[0]
            shift = self._u[uniq] @ d
            total = total - float(h @ self.temp.features(uniq, t) @ (self.temp.beta0 + d))
            var = 1.0 / self.precision[uniq]
            mu = (self.eta[uniq] - shift) * var
            s_var = float((h**2 * var).sum()) + self.noise_variance(uniq, h)
            gain = h * var / s_var
            new_mu = mu + gain * (total - float((h * mu).sum()))
            new_var = var - h**2 * var**2 / s_var
            self.precision[uniq] = 1.0 / new_var
            self.eta[uniq] = new_mu / new_var + shift
            self._cache = None
            return
        post = self.posterior()
        mu, var = post.mean[uniq], post.std[uniq] ** 2
        s_var = float((h**2 * var).sum()) + self.noise_variance(uniq, h)
        resid = total - float((h * mu).sum())
        gain = h * var / s_var
        new_mu = mu + gain * resid
        new_var = var - h**2 * var**2 / s_var
        self.precision[uniq] = 1.0 / new_var
        self.eta[uniq] = new_mu / new_var
        self._cache = None

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: TemperatureArg = None,
    ) -> tuple[float, float]:
        """Mean and variance [Wh, Wh²] of ``Σ weights·f(segment_ids)`` (independent segments
        given the temperature coefficients; on a trip at ``temperature`` [°C])."""
        u, h = combine_weights(segment_ids, weights)
        if temperature is not None or self.temp.active:
            t = None if temperature is None else float(check_temperature(temperature))
            if self.temp.active:
                mean, var, slope = self._conditional()
            else:
                mean, var = self.eta / self.precision, 1.0 / self.precision
                slope = np.zeros((self.n_segments, self.temp.m))
            return self.temp.sum_moments(u, h, float(h @ mean[u]), float(h**2 @ var[u]),
                                         slope, t)
        post = self.posterior()
        return float(h @ post.mean[u]), float((h**2 * post.std[u] ** 2).sum())

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed ``Σ weights·y(segment_ids)``:
        ``ς² Σ weights·a²`` (``a = 1`` when uniform)."""
        u, h = combine_weights(segment_ids, weights)
        return float(h @ self.scale2[u]) * self._noise_var

    def reset_segments(
        self, segment_ids: ArrayLike, counts: ArrayLike, sums: ArrayLike, sums_sq: ArrayLike
    ) -> None:
        """Forget everything learned about ``segment_ids`` and learn instead from readings with
        the given statistics (per segment: count, Σy [Wh], Σy² [Wh²]); see
        :meth:`ev_nav.gp.incremental.IncrementalGP.reset_segments`. BI keeps no correlations,
        so what trip totals taught these segments goes too."""
        ids, cnt, s1, _ = validate_reset(segment_ids, counts, sums, sums_sq, self.n_segments)
        prior = self.prior_var * self.scale2[ids]
        noise = self._noise_var * self.scale2[ids]
        self.precision[ids] = 1.0 / prior + cnt / noise
        self.eta[ids] = self.prior_mean[ids] / prior + s1 / noise
        self.n_obs[ids] = cnt
        if self.temp.active:  # the kept readings carry no temperature
            self._u[ids] = 0.0
            self._q[ids] = 0.0
            self._w[ids] = 0.0
        self._cache = None

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one observation of each listed segment: ``ς² a_e²``."""
        return self.scale2[np.asarray(segment_ids, dtype=np.int64)] * self._noise_var

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: TemperatureArg = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of ``segment_ids``: diagonal (segments independent),
        plus what the shared temperature coefficients add."""
        ids = np.asarray(segment_ids, dtype=np.int64)
        if temperature is None and not self.temp.active:
            return np.diag(self.posterior().std[ids] ** 2)
        t = None if temperature is None else float(check_temperature(temperature))
        if self.temp.active:
            _, var, slope = self._conditional()
        else:
            var, slope = 1.0 / self.precision, np.zeros((self.n_segments, self.temp.m))
        return self.temp.route_covariance(ids, np.diag(var[ids]), slope, t)

    def state_dict(self) -> dict[str, Any]:
        """Arrays and settings that restore the model exactly."""
        return {
            "kind": "bi",
            "version": _STATE_VERSION,
            "n_segments": self.n_segments,
            "network_hash": self.network_hash,
            "prior_var": self.prior_var,
            "noise_var": self._noise_var,
            "segment_scale": self.segment_scale,
            "prior_mean": self.prior_mean.copy(),
            "precision": self.precision.copy(),
            "eta": self.eta.copy(),
            "n_obs": self.n_obs.copy(),
            **({"temperature": {"climate": self.temp.state(), "u": self._u.copy(),
                                "q": self._q.copy(), "w": self._w.copy()}}
               if self.temp.active else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> BIModel:
        """Restore a :meth:`state_dict`; raises :class:`ModelStateError` on a mismatch."""
        check_model_header(
            state,
            kind="bi",
            version=_STATE_VERSION,
            what="a BI model",
            n_segments=self.n_segments,
            network_hash=self.network_hash,
        )
        scale = str(state.get("segment_scale", "uniform"))  # absent: saved before scales
        if scale != self.segment_scale:
            raise ModelStateError(
                f"the checkpoint's segment_scale is {scale!r}, this model's "
                f"{self.segment_scale!r}"
            )
        arrays = {k: np.asarray(state[k]) for k in ("prior_mean", "precision", "eta", "n_obs")}
        if any(a.shape != (self.n_segments,) for a in arrays.values()):
            raise ModelStateError("checkpoint arrays have the wrong length for this network")
        self.prior_var = float(state["prior_var"])
        self._noise_var = float(state["noise_var"])
        self.prior_mean = arrays["prior_mean"].astype(np.float64).copy()
        self.precision = arrays["precision"].astype(np.float64).copy()
        self.eta = arrays["eta"].astype(np.float64).copy()
        self.n_obs = arrays["n_obs"].astype(np.int64).copy()
        self.temp.active = False
        self._u = self._q = self._w = None
        if "temperature" in state:
            temp = state["temperature"]
            self.temp.check_state(temp["climate"])
            self._activate_temperature()
            try:
                n, m = self.n_segments, self.temp.m
                self._u = np.asarray(temp["u"], dtype=np.float64).reshape(n, m).copy()
                self._q = np.asarray(temp["q"], dtype=np.float64).reshape(n, m, m).copy()
                self._w = np.asarray(temp["w"], dtype=np.float64).reshape(n, m).copy()
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelStateError(f"damaged BI checkpoint: {exc}") from None
        self._cache = None
        return self
