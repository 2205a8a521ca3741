"""The exact learner's posterior as plain arrays: the part of :mod:`ev_nav.gp.incremental` that
needs no torch.

:class:`~ev_nav.gp.incremental.IncrementalGP` keeps the posterior mean ``μ`` and the full
covariance ``Σ`` of all N segments as NumPy arrays; torch (gpytorch kernels, autograd) is needed
only to build the prior kernel and to fit hyperparameters, which happen when observations are
recorded. Planning a trip only *reads* the posterior, so this module holds what both sides share —
the rank-k conditioning steps, the marginal and joint read-outs, the posterior cache files and
their key — and :class:`ExactPosterior`, the read side a route command restores from a state's
checkpoint and its cached posterior without importing torch (``ev-nav route`` start-up: see
``scripts/bench_cli.py``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.checkpoints import check_model_header
from ev_nav.errors import ConfigError, ModelStateError
from ev_nav.gp.lapack import syrk_lower, trtrs_lower
from ev_nav.gp.numerics import cholesky_jitter_np
from ev_nav.gp.posterior import (
    SegmentPosterior,
    combine_weights,
    stored_total,
    validate_observations,
    validate_total,
)

if TYPE_CHECKING:
    from ev_nav.store.state_cache import StateCache

__all__ = [
    "CACHE_KEEP",
    "CHECKPOINT_KIND",
    "MAX_EXACT_SEGMENTS",
    "STATE_VERSION",
    "ExactPosterior",
    "IncrementalConfig",
    "posterior_key",
]

#: The ``kind`` and format version of the exact learner's checkpoints.
CHECKPOINT_KIND = "incremental"
STATE_VERSION = 1
#: Largest network the exact learner accepts: it holds the full N × N posterior covariance
#: (1.2 GB at this size, ~3× that transiently during a refresh). Larger networks use the
#: inducing-point approximation of :mod:`ev_nav.gp.svgp` (see docs/gp.md).
MAX_EXACT_SEGMENTS = 12_000
#: Cache files of each kind (prior kernel, posterior) kept in a cache folder (the newest).
CACHE_KEEP = 2
_JITTERS = (0.0, 1e-10, 1e-8, 1e-6)
#: Jitter ladder for factorising a whole posterior covariance to draw from it: a posterior that
#: has learned many segments is singular to working precision more often than a data block.
SAMPLE_JITTERS = (0.0, 1e-10, 1e-8, 1e-6, 1e-4)
#: The raw (unconstrained) kernel hyperparameters a checkpoint stores, in key order.
HYPER_FIELDS = ("raw_kappa", "raw_ls_1", "raw_ls_2", "raw_s_1", "raw_s_2")


#: How a learner's prior variance and noise vary over segments (``IncrementalConfig``).
SEGMENT_SCALES = ("uniform", "loss")


@dataclass(frozen=True)
class IncrementalConfig:
    """Settings of the exact, incremental learner.

    Attributes
    ----------
    graph_nu, graph_kappa : float
        Graph Matérn ν (fixed) and initial κ.
    lengthscale : float
        Initial lengthscale of both feature kernels (all dimensions).
    kernel_mode : str
        Graph kernel computation (see :mod:`ev_nav.gp.kernels`); ``"auto"``: sparse for integer ν.
    outputscale, noise_var : float, optional
        Initial σ0² and ς² [Wh²]; default :meth:`PriorSettings.from_network`.
    learn_hyperparameters : bool
        Fit the hyperparameters on the schedule (otherwise they stay at their initial values;
        the schedule's refreshes still happen, and keep the replay log of checkpoints short).
    learn_graph_kappa : bool
        Include κ in the fit. Off by default: every new κ costs a sparse factorisation and
        fresh kernel columns for the fit's segments and for all N (measured on Monaco at
        D = 600: a fit takes 5.9 s with κ against 0.5 s without), and on the paper routes it
        did not lower regret (docs/gp.md).
    first_fit : int
        Update (trip) at which the first refresh (and fit) happens.
    fit_growth : float
        Next refresh once the number of updates is ``fit_growth`` times that at the last one.
    fit_max_gap : int
        ... or at the latest this many updates after it.
    fit_max_rows : int
        Observation rows (observed segments and trip totals) that the marginal likelihood uses;
        beyond it a random subset (the likelihood of a subset of the data is still exact).
    fit_iterations : int
        L-BFGS iterations per fit (warm-started from the current values).
    fit_test_level : float
        At the schedule's steady state (one fit per ``fit_max_gap`` updates; every fit before
        it is taken) a fit's values replace the current ones only when the likelihood-ratio
        test on the fit's rows rejects the current values at this level
        (:func:`~ev_nav.gp.fitting.significant_gain`); 1 (this learner's default) takes every
        improvement. The regional learner, whose every accepted fit rebuilds its prior,
        defaults to 0.01.
    prior_log_sd : float
        Standard deviation of the log-normal hyperparameter priors (natural-log units).
    segment_scale : str
        ``"uniform"`` (the paper's model: one prior variance σ0² and one noise variance ς² [Wh²]
        for every segment) or ``"loss"``: each segment's prior deviation and noise scale with its
        deterministic loss ``a_e`` (:func:`ev_nav.potential.loss_scale`), covariance
        ``a_e a_e' k(e, e')`` and noise variance ``ς² a_e²``, so σ0² and ς² are relative
        (unitless; defaults 0.25² and 0.2², the physical world's spreads): the physical world's
        model; see ``docs/objective.md``.
    """

    graph_nu: float = 2.0
    graph_kappa: float = 1.0
    lengthscale: float = 1.0
    kernel_mode: str = "auto"
    outputscale: float | None = None
    noise_var: float | None = None
    learn_hyperparameters: bool = True
    learn_graph_kappa: bool = False
    first_fit: int = 10
    fit_growth: float = 1.5
    fit_max_gap: int = 100
    fit_max_rows: int = 600
    fit_iterations: int = 20
    fit_test_level: float = 1.0
    prior_log_sd: float = 1.0
    segment_scale: str = "uniform"

    def __post_init__(self) -> None:
        if self.segment_scale not in SEGMENT_SCALES:
            raise ConfigError(
                f"segment_scale must be one of {', '.join(SEGMENT_SCALES)}, got "
                f"{self.segment_scale!r}"
            )
        if self.kernel_mode != "auto":  # the default is always valid; the list lives with the
            from ev_nav.gp.kernels import KERNEL_MODES  # kernels (torch), so only others look

            if self.kernel_mode not in KERNEL_MODES:
                raise ConfigError(f"kernel_mode must be one of {', '.join(KERNEL_MODES)}")
        if self.first_fit < 1 or self.fit_max_gap < 1 or not self.fit_growth > 1.0:
            raise ConfigError("first_fit and fit_max_gap must be >= 1 and fit_growth > 1")
        if self.fit_max_rows < 2 or self.fit_iterations < 1 or not self.prior_log_sd > 0:
            raise ConfigError("fit_max_rows >= 2, fit_iterations >= 1 and prior_log_sd > 0")
        if not 0.0 < self.fit_test_level <= 1.0:
            raise ConfigError(f"fit_test_level must be in (0, 1], got {self.fit_test_level}")


# ----------------------------------------------------------------------------- linear algebra
def cholesky(
    a: NDArray[np.float64], ladder: tuple[float, ...] = _JITTERS
) -> NDArray[np.float64]:
    """Lower Cholesky factor of an SPD matrix (only its lower triangle is read); a tiny
    relative jitter from ``ladder`` only if LAPACK refuses."""
    chol, _ = cholesky_jitter_np(
        a,
        ladder=ladder,
        error=ModelStateError,
        message="posterior covariance is not positive definite even with jitter; the "
        "hyperparameters are degenerate (refit or reset them)",
    )
    return chol


def sym_rows(cov: NDArray[np.float64], ids: NDArray[np.int64]) -> NDArray[np.float64]:
    """Rows ``Σ[ids, :]`` (shape (k, N)) of a symmetric column-major matrix of which only the
    lower triangle is valid."""
    # Row i from column i's lower part (one contiguous copy per column in column-major order)
    # for j >= i, then its part left of the diagonal, Σ[i, :i], as one strided slice per row.
    # Gathering all k × N elements twice by fancy indexing and choosing by a mask cost four
    # times as long (~50 ms of each ~300 ms pass of a server's model writer on Monaco, with
    # k ~ 1,000 segments a pass); a pass has one row per distinct segment it observed.
    ids = np.asarray(ids, dtype=np.int64)
    out = np.ascontiguousarray(cov[:, ids].T)
    for row, i in enumerate(ids.tolist()):
        out[row, :i] = cov[i, :i]
    return out


def syrk_down(cov: NDArray[np.float64], w: NDArray[np.float64]) -> NDArray[np.float64]:
    """``Σ ← Σ − WᵀW`` on the lower triangle, in place (BLAS SYRK: half a GEMM's flops)."""
    if not cov.flags.f_contiguous:
        raise ModelStateError("internal: the covariance must be column-major for SYRK")
    # GIL released during the call (gp.lapack): a server's request threads keep running
    return syrk_lower(cov, w)


def marginal_std(cov: NDArray[np.float64]) -> NDArray[np.float64]:
    """Posterior standard deviation of every segment [Wh] from ``Σ``'s diagonal."""
    return np.sqrt(np.clip(np.diagonal(cov), 0.0, None))


def route_covariance(cov: NDArray[np.float64], ids: ArrayLike) -> NDArray[np.float64]:
    """Joint covariance ``Σ[ids, ids]`` [Wh²] (lower-triangle storage read symmetrically)."""
    ids = np.asarray(ids, dtype=np.int64)
    # only the k × k block is read (O(k²)): gathering whole rows first cost O(k·N), ~5 ms a
    # route on Monaco, paid by every route a server plans
    block = cov[np.ix_(ids, ids)]
    return np.where(ids[:, None] >= ids[None, :], block, block.T)


def predict_sum(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    segment_ids: ArrayLike,
    weights: ArrayLike | None = None,
) -> tuple[float, float]:
    """Mean and variance [Wh, Wh²] of ``Σ weights·f(segment_ids)`` (weights default 1; a
    partly driven end segment of a trip counts with its share)."""
    u, w = combine_weights(segment_ids, weights)
    return float(w @ mean[u]), float(w @ route_covariance(cov, u) @ w)


# ----------------------------------------------------------------------------- rank-k updates
def segment_residuals(
    ids: NDArray[np.int64], y: NDArray[np.float64], prior_mean: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Residuals ``r = y − E_det`` of one batch, its distinct segments ``u``, their counts and
    residual sums (the sufficient statistics the conditioning step uses)."""
    r = y - prior_mean[ids]
    u, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
    return r, u, cnt, np.bincount(inv, weights=r, minlength=u.size)


def _scale(noise_scale: NDArray[np.float64] | None, u: NDArray[np.int64]) -> NDArray | float:
    return 1.0 if noise_scale is None else noise_scale[u]


def total_noise(
    h: NDArray[np.float64], u: NDArray[np.int64], noise_scale: NDArray[np.float64] | None
) -> float:
    """Noise variance of a trip total ``Σ h_e y_e`` in units of ς²: ``Σ h_e s_e`` (a partly
    driven segment adds its share of the segment's noise variance ``ς² s_e``)."""
    return float(h.sum()) if noise_scale is None else float(h @ noise_scale[u])


def segment_noise(
    u: NDArray[np.int64], noise_scale: NDArray[np.float64] | None, noise_var: float
) -> NDArray[np.float64]:
    """Each listed segment's own observation-noise variance [Wh²], ``ς² s_e``: for every
    segment the very number :func:`total_noise` · ς² gives for that segment driven alone."""
    return (np.ones(u.size) if noise_scale is None else noise_scale[u]) * noise_var


def condition_segments(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    prior_mean: NDArray[np.float64],
    noise_var: float,
    u: NDArray[np.int64],
    cnt: NDArray[np.int64],
    s1: NDArray[np.float64],
    noise_scale: NDArray[np.float64] | None = None,
) -> None:
    """Condition ``(μ, Σ)`` in place on the mean residuals ``s1 / cnt`` of segments ``u``.

    With ``M = Σ[T, T] + diag(ς² s_T/c) = L Lᵀ`` and ``W = L⁻¹ Σ[T, :]``: ``Σ ← Σ − WᵀW``,
    ``μ ← μ + Wᵀ L⁻¹(ȳ − μ_T)`` (exact Bayesian update, N²k flops). ``noise_scale`` is each
    segment's noise variance in units of ς² (default 1: the paper's uniform noise).
    """
    a = sym_rows(cov, u)  # Σ[T, :]  (k, N)
    m = a[:, u] + np.diag(noise_var * _scale(noise_scale, u) / cnt)
    chol = cholesky(0.5 * (m + m.T))
    _gain_step(cov, mean, a, chol, prior_mean[u] + s1 / cnt - mean[u], alpha=-1.0)


def _gain_step(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    a: NDArray[np.float64],
    chol: NDArray[np.float64],
    innov: NDArray[np.float64],
    alpha: float,
) -> None:
    """``W = L⁻¹ A``, ``μ ← μ + Wᵀ L⁻¹ innov``, ``Σ ← Σ + α WᵀW`` in place (``α = −1``: an
    update, :func:`condition_segments`; ``+1``: its undoing, :func:`uncondition_segments`)."""
    w = trtrs_lower(chol, a)  # L⁻¹ Σ[T, :]
    z = trtrs_lower(chol, innov)
    mean += w.T @ z
    if alpha < 0:
        syrk_down(cov, w)
    else:
        syrk_lower(cov, w, alpha=alpha)


def uncondition_segments(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    prior_mean: NDArray[np.float64],
    noise_var: float,
    u: NDArray[np.int64],
    cnt: NDArray[np.int64],
    s1: NDArray[np.float64],
    noise_scale: NDArray[np.float64] | None = None,
) -> bool:
    """Undo :func:`condition_segments` in place: remove the information of the mean residuals
    ``s1 / cnt`` of segments ``u`` (all their readings so far) from ``(μ, Σ)``.

    Removing observations ``y = Hf + ε`` (``ε ~ N(0, R)``) takes their precision ``HᵀR⁻¹H``
    away: with ``M = R − Σ[T, T] = L Lᵀ`` (positive definite when the posterior holds them:
    it knows each segment better than its readings alone) and ``W = L⁻¹ Σ[T, :]``,
    ``Σ ← Σ + WᵀW`` and ``μ ← μ + Wᵀ L⁻¹(μ_T − ȳ)`` — the same N²k flops as an update. Returns
    ``False``, with nothing changed, when ``M`` is not positive definite in floating point
    (the caller recomputes the posterior from its statistics instead).
    """
    a = sym_rows(cov, u)  # Σ[T, :]
    m = np.diag(noise_var * _scale(noise_scale, u) / cnt) - a[:, u]
    try:  # no jitter: a jittered M would remove other information than the readings had
        chol = cholesky(0.5 * (m + m.T), ladder=(0.0,))
    except ModelStateError:
        return False
    _gain_step(cov, mean, a, chol, mean[u] - (prior_mean[u] + s1 / cnt), alpha=1.0)
    return True


def condition_total(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    noise_var: float,
    u: NDArray[np.int64],
    h: NDArray[np.float64],
    total: float,
    noise_scale: NDArray[np.float64] | None = None,
) -> None:
    """Condition ``(μ, Σ)`` in place on a trip total ``Σ h_e f(e)`` over distinct segments
    ``u`` (noise ``ς² Σ h_e s_e``: each segment's noise variance ``ς² s_e`` per whole segment
    driven; rank 1)."""
    sh = h @ sym_rows(cov, u)  # Σ h
    s = float(sh[u] @ h) + total_noise(h, u, noise_scale) * noise_var
    w = sh / math.sqrt(s)
    innov = total - float(h @ mean[u])
    mean += w * (innov / math.sqrt(s))
    syrk_down(cov, w[None, :])


def condition_rows(
    cov: NDArray[np.float64],
    mean: NDArray[np.float64],
    prior_mean: NDArray[np.float64],
    noise_var: float,
    u: NDArray[np.int64],
    cnt: NDArray[np.int64],
    s1: NDArray[np.float64],
    totals: Sequence[tuple[NDArray[np.int64], NDArray[np.float64], float]],
    noise_scale: NDArray[np.float64] | None = None,
) -> None:
    """Condition ``(μ, Σ)`` in place on many observations at once: the mean residuals
    ``s1 / cnt`` of segments ``u`` (noise ``ς²/c``) and trip totals ``(ids, h, total)``
    (noise ``ς² Σ h``), as one rank-k update.

    Exact Bayes, the same posterior as conditioning on each observation in turn, for the cost
    of one factorisation of the k × k innovation covariance and one SYRK (``N² k`` flops) —
    what absorbing a backlog of trips costs instead of one update per trip.
    """
    # the one-kind cases take the single-update steps, so that absorbing one batch gives the
    # very bits of update()/update_total() (a checkpoint's replay log is applied that way)
    if not totals:
        if u.size:
            condition_segments(cov, mean, prior_mean, noise_var, u, cnt, s1, noise_scale)
        return
    if not u.size and len(totals) == 1:
        condition_total(cov, mean, noise_var, *totals[0], noise_scale)
        return
    rows, target, noise = [], [], []
    if u.size:
        rows.append(sym_rows(cov, u))  # Σ[T, :]
        target.append(prior_mean[u] + s1 / cnt - mean[u])
        noise.append(noise_var * _scale(noise_scale, u) / cnt)
    for ids, h, total in totals:
        rows.append((h @ sym_rows(cov, ids))[None, :])  # hᵀ Σ[ids, :]
        target.append(np.array([total - float(h @ mean[ids])]))
        noise.append(np.array([total_noise(h, ids, noise_scale) * noise_var]))
    if not rows:
        return
    a = np.vstack(rows)  # H Σ  (k, N)
    cols = [a[:, u]] if u.size else []
    cols += [(a[:, ids] @ h)[:, None] for ids, h, _ in totals]
    m = np.hstack(cols) + np.diag(np.concatenate(noise))  # H Σ Hᵀ + R
    chol = cholesky(0.5 * (m + m.T))
    w = trtrs_lower(chol, a)
    z = trtrs_lower(chol, np.concatenate(target))
    mean += w.T @ z
    syrk_down(cov, w)


def batch_rows(
    segments: Sequence[tuple[NDArray[np.int64], NDArray[np.float64]]],
    prior_mean: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Distinct segments, counts and residual sums of several per-segment batches together."""
    if not segments:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    ids = np.concatenate([i for i, _ in segments])
    y = np.concatenate([v for _, v in segments])
    _, u, cnt, s1 = segment_residuals(ids, y, prior_mean)
    return u, cnt, s1


# ----------------------------------------------------------------------------- cache files
LogEntry = tuple[str, NDArray[np.int64], NDArray[np.float64]]


def posterior_key(
    network_hash: str,
    hyper: Mapping[str, Any],
    base: Mapping[str, Any],
    totals: Sequence[tuple[Any, ...]],
    log: Sequence[LogEntry],
) -> str:
    """Content key of a posterior: the network, the raw hyperparameters and noise variance, the
    sufficient statistics and totals of the last refresh, and the observations since.

    Everything comes from a checkpoint's plain arrays (no kernel evaluation), so a reader
    without torch computes the same key as the learner that wrote the file.
    """
    digest = hashlib.sha256(network_hash.encode())
    for name in HYPER_FIELDS:
        digest.update(np.asarray(hyper[name], dtype=np.float64).tobytes())
    digest.update(np.float64(hyper["noise_var"]).tobytes())
    for key, dtype in (("n_obs", np.int64), ("sum_r", np.float64), ("sum_r2", np.float64),
                       ("support", np.int64)):
        digest.update(np.ascontiguousarray(base[key], dtype=dtype).tobytes())
    extra = base.get("extra_var")  # only where a road was flagged as changed: older keys stay
    if extra is not None and np.any(np.asarray(extra) != 0):
        digest.update(b"extra_var" + np.ascontiguousarray(extra, dtype=np.float64).tobytes())
    for entry in totals:  # (ids, weights, total), or (ids, total) as older checkpoints hold
        u, h, total = stored_total(entry)
        digest.update(u.tobytes() + h.tobytes() + np.float64(total).tobytes())
    for kind, ids, y in (stored_log_entry(*e) for e in log):
        digest.update(kind.encode() + np.asarray(ids, dtype=np.int64).tobytes()
                      + np.asarray(y, dtype=np.float64).tobytes())
    return digest.hexdigest()[:24]


def stored_log_entry(kind: str, ids: ArrayLike, y: ArrayLike) -> LogEntry:
    """A replay-log entry as the learner applies it: a trip total is ``("tot", distinct ids,
    [total, weights...])``; older checkpoints hold ``[total]`` over repeated ids."""
    ids_a = np.asarray(ids, dtype=np.int64)
    y_a = np.asarray(y, dtype=np.float64)
    if kind == "tot" and y_a.size == 1:
        u, h = combine_weights(ids_a, None)
        return kind, u, np.concatenate([y_a, h])
    return kind, ids_a, y_a


def posterior_name(key: str) -> str:
    """Cache-file name of the posterior ``[Σ | μ]`` (an ``(N, N + 1)`` column-major ``.npy``)
    of ``key``."""
    return f"posterior-{key}.npy"


def read_matrix(
    cache: StateCache | None, name: str, n: int, extra_columns: int = 0
) -> NDArray[np.float64] | None:
    """A cached (n, n + extra) float64 matrix as a column-major array, or None if missing or
    refused: its bytes must match the checksum the state recorded when it was written
    (:class:`~ev_nav.store.state_cache.StateCache`), and its diagonal must be finite."""
    if cache is None:
        return None
    arr = cache.read_array(name, (n, n + extra_columns), np.float64)
    if arr is None or not np.all(np.isfinite(np.diagonal(arr))):
        return None
    return np.asfortranarray(arr)


def read_posterior(
    cache: StateCache | None, key: str, n: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    """The cached ``(Σ, μ)`` of ``key``, or None (no cache, missing, refused)."""
    both = read_matrix(cache, posterior_name(key), n, extra_columns=1)
    if both is None:
        return None
    return both[:, :n], np.ascontiguousarray(both[:, n])


def write_matrix(cache: StateCache, name: str, arr: NDArray[np.float64]) -> None:
    """Store a derived matrix atomically with its checksum (the newest :data:`CACHE_KEEP` of
    its kind are kept); a failure (full disk, read-only) only costs speed."""
    cache.write_array(name, arr, keep=CACHE_KEEP)


# ----------------------------------------------------------------------------- the read side
class ExactPosterior:
    """The exact learner's posterior restored as arrays, for planning (no torch).

    Offers what planning reads from a :class:`~ev_nav.gp.posterior.SegmentModel` —
    :meth:`posterior`, :meth:`route_covariance`, :meth:`predict_sum`, :attr:`noise_std` — with
    the very arrays :class:`~ev_nav.gp.incremental.IncrementalGP` would hold after restoring the
    same checkpoint, so routes and predictions are bit-identical. It can also absorb observations
    recorded after the checkpoint by the same rank-k updates, as long as none of them is the
    update at which the learner refreshes (and fits its hyperparameters: torch); see
    :attr:`updates_before_refresh`. It cannot save a checkpoint.

    Use :meth:`from_checkpoint`, or :meth:`IncrementalGP.frozen_posterior
    <ev_nav.gp.incremental.IncrementalGP.frozen_posterior>` for a read-only view of a live
    learner (a server's snapshot).
    """

    checkpoint_kind = CHECKPOINT_KIND

    def __init__(
        self,
        mean: NDArray[np.float64],
        cov: NDArray[np.float64],
        noise_var: float,
        prior_mean: NDArray[np.float64],
        n_updates: int,
        next_refresh: int,
        noise_scale: NDArray[np.float64] | None = None,
    ) -> None:
        self.n = int(mean.shape[0])
        self.noise_scale = noise_scale
        self._mean = mean
        self._cov = cov
        self.noise_var = float(noise_var)
        self.prior_mean = prior_mean
        self.n_updates = int(n_updates)
        self.next_refresh = int(next_refresh)
        self._post: SegmentPosterior | None = None
        #: the temperature prior (:class:`~ev_nav.gp.temperature.TemperatureTerm`) of a learner
        #: that has seen no temperature yet, where the view was made by one: predictions at a
        #: temperature add the physics prior (None: the view takes no temperature)
        self.temp: Any = None

    @classmethod
    def from_checkpoint(
        cls,
        state: Mapping[str, Any],
        *,
        network_hash: str,
        n_segments: int,
        cache: StateCache | None,
    ) -> ExactPosterior | None:
        """The posterior of a decoded exact-learner checkpoint, from its cached ``(Σ, μ)``.

        Returns None when it cannot be restored without the learner: no cached posterior for
        this checkpoint (the learner recomputes it), or a checkpoint the learner would not load
        either (another kind, version, network or configuration).

        Parameters
        ----------
        state
            :func:`ev_nav.checkpoints.decode` output, tensors as NumPy arrays.
        network_hash, n_segments
            The state's network.
        cache
            The state's verified cache folder.
        """
        try:
            check_model_header(
                state,
                kind=CHECKPOINT_KIND,
                version=STATE_VERSION,
                what="an incremental-GP",
                n_segments=n_segments,
                network_hash=network_hash,
                config=IncrementalConfig(),  # what the learner of a state is built with
            )
            log = [stored_log_entry(str(k), i, y) for k, i, y in state["log"]]
            key = posterior_key(network_hash, state["hyper"], state["base"], state["totals"],
                                log)
            prior_mean = np.asarray(state["prior_mean"], dtype=np.float64).copy()
            noise_var = float(state["hyper"]["noise_var"])
            counters = int(state["n_updates"]), int(state["next_refresh"])
        except (ModelStateError, KeyError, TypeError, ValueError):
            return None
        if "climate" in state:  # temperature coefficients: only the learner restores them
            return None
        cached = read_posterior(cache, key, n_segments)
        if cached is None or prior_mean.shape != (n_segments,):
            return None
        cov, mean = cached
        return cls(mean, cov, noise_var, prior_mean, *counters)

    # ------------------------------------------------------------------ reading
    @property
    def noise_std(self) -> float:
        """Observation-noise standard deviation ς [Wh]."""
        return math.sqrt(self.noise_var)

    def posterior(self, temperature: float | None = None) -> SegmentPosterior:
        """Posterior mean and std of every segment's expected energy [Wh] (cached), on a trip
        at ``temperature`` [°C] (the physics prior's temperature terms: see :attr:`temp`)."""
        if temperature is not None:
            mean, var = self._temp().marginals(
                self._mean, np.clip(np.diagonal(self._cov), 0.0, None), self._no_slope(),
                temperature,
            )
            return SegmentPosterior(mean=mean, std=np.sqrt(np.clip(var, 0.0, None)),
                                    noise_std=self.noise_std)
        if self._post is None:
            self._post = SegmentPosterior(
                mean=self._mean.copy(), std=marginal_std(self._cov), noise_std=self.noise_std
            )
        return self._post

    def _temp(self) -> Any:
        if self.temp is None:
            raise ConfigError("this restored posterior takes no temperature; open the learner "
                              "(docs/temperature.md)")
        return self.temp

    def _no_slope(self) -> NDArray[np.float64]:
        return np.zeros((self.n, self._temp().m))

    def route_covariance(
        self, segment_ids: ArrayLike, temperature: float | None = None
    ) -> NDArray[np.float64]:
        """Joint posterior covariance [Wh²] of the latent energies of ``segment_ids``."""
        cov = route_covariance(self._cov, segment_ids)
        if temperature is None:
            return cov
        return self._temp().route_covariance(np.asarray(segment_ids, dtype=np.int64), cov,
                                             self._no_slope(), temperature)

    def predict_sum(
        self,
        segment_ids: ArrayLike,
        weights: ArrayLike | None = None,
        temperature: float | None = None,
    ) -> tuple[float, float]:
        """Mean and variance [Wh, Wh²] of ``Σ weights·f(segment_ids)`` (weights default 1), on
        a trip at ``temperature`` [°C] where given."""
        mean, var = predict_sum(self._cov, self._mean, segment_ids, weights)
        if temperature is None:
            return mean, var
        u, h = combine_weights(segment_ids, weights)
        return self._temp().sum_moments(u, h, mean, var, self._no_slope(), temperature)

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        """Noise variance [Wh²] of an observed ``Σ weights·y(segment_ids)``."""
        u, h = combine_weights(segment_ids, weights)
        return total_noise(h, u, self.noise_scale) * self.noise_var

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        """Noise variance [Wh²] of one observation of each listed segment."""
        return segment_noise(np.asarray(segment_ids, dtype=np.int64), self.noise_scale,
                             self.noise_var)

    # ------------------------------------------------------------------ pending observations
    @property
    def updates_before_refresh(self) -> int:
        """How many more updates this posterior can absorb: the learner's next one after these
        refreshes (refits its hyperparameters), which only the learner can do."""
        return max(self.next_refresh - self.n_updates - 1, 0)

    def update(self, segment_ids: ArrayLike, energies: ArrayLike) -> None:
        """Absorb per-segment observations [Wh], exactly as the learner's update does.

        Raises
        ------
        ModelStateError
            If this update is one at which the learner refreshes (use the learner).
        """
        ids, y = validate_observations(segment_ids, energies, self.n)
        if ids.size == 0:
            return
        self._count_update()
        _, u, cnt, s1 = segment_residuals(ids, y, self.prior_mean)
        condition_segments(
            self._cov, self._mean, self.prior_mean, self.noise_var, u, cnt, s1, self.noise_scale
        )

    def update_total(
        self, segment_ids: ArrayLike, total_energy: float, weights: ArrayLike | None = None
    ) -> None:
        """Absorb a trip total [Wh] (``weights``: the share of each segment driven), exactly as
        the learner's update does (see :meth:`update`)."""
        u, h, total = validate_total(segment_ids, total_energy, self.n, weights)
        self._count_update()
        condition_total(self._cov, self._mean, self.noise_var, u, h, total, self.noise_scale)

    def absorb(
        self,
        segments: Sequence[tuple[ArrayLike, ArrayLike]],
        totals: Sequence[tuple[ArrayLike, float, ArrayLike | None]],
    ) -> None:
        """Absorb many observation batches at once (per-segment ``(ids, energies)`` and trip
        totals ``(ids, total, weights)``), exactly as the learner's :meth:`absorb` does: one
        rank-k update, counted as one update per batch."""
        if any(len(b) > 2 for b in segments) or any(len(b) > 3 for b in totals):
            raise ModelStateError(
                "observations with a temperature need the learner (the temperature "
                "coefficients); restore the full model to apply them"
            )
        seg = [validate_observations(i, y, self.n) for i, y in segments]
        seg = [(i, y) for i, y in seg if i.size]
        tot = [validate_total(i, t, self.n, w) for i, t, w in totals]
        if not seg and not tot:
            return
        self._count_update(len(seg) + len(tot))
        u, cnt, s1 = batch_rows(seg, self.prior_mean)
        condition_rows(
            self._cov, self._mean, self.prior_mean, self.noise_var, u, cnt, s1, tot,
            self.noise_scale,
        )

    def _count_update(self, n: int = 1) -> None:
        if self.updates_before_refresh < n:
            raise ModelStateError(
                "this update refreshes the learner (a hyperparameter fit); restore the full "
                "model to apply it"
            )
        self.n_updates += n
        self._post = None
