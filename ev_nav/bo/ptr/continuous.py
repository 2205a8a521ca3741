"""BPT-UCB and BPT-TS over a *continuous* design box (paper App. D; decision A9, docs/bo-ptr.md).

The environment stays a weighted grid ``Ω`` (as in every experiment of the paper); the design
``x`` ranges over a box ``[lo, hi]^d``. Each step evaluates the acquisition on a fresh candidate
set (scrambled Sobol points plus the designs queried so far), which plays the role of the
discretisation ``[x]`` of App. D without fixing it in advance.

* **BPT-TS** draws one approximate posterior *function* with random Fourier features
  (:func:`ev_nav.gp.exact.rff_posterior_sample`, 1000 features as in the newsvendor
  experiment), so the sample is consistent across all candidates and environments, and takes the
  candidate maximising the sample's PTR.
* **BPT-UCB** uses the exact GP marginals on ``candidates × Ω``.
* ``w_t`` follows eq. 4 from the exact posterior at ``(x_t, Ω)``.

The GP is the shared :class:`ev_nav.gp.exact.ExactGP` (optionally with marginal-likelihood
hyperparameters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ev_nav.bo.ptr.measure import (
    BPTUCB,
    PTRPosterior,
    argmax_random,
    ptr_of_values,
    ptr_posterior,
    select_w,
)
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP, RandomFourierFeatures, rff_posterior_sample

DTYPE = torch.float64


def _product(Xc: Tensor, W: Tensor) -> Tensor:
    """All pairs ``(x, w)`` in row-major order, shape ``(n_x * n_w, d_x + d_w)``."""
    nx, nw = Xc.shape[0], W.shape[0]
    return torch.cat([Xc.repeat_interleave(nw, 0), W.repeat(nx, 1)], dim=1)


def candidate_designs(bounds: np.ndarray, n: int, seed: int, extra: Tensor | None = None) -> Tensor:
    """``n`` scrambled Sobol points in the box ``bounds`` (``(d, 2)``) plus ``extra`` rows."""
    b = torch.as_tensor(bounds, dtype=DTYPE)
    if b.ndim != 2 or b.shape[1] != 2 or bool((b[:, 1] <= b[:, 0]).any()):
        raise ConfigError("bounds must be a (d, 2) array of increasing [low, high] pairs")
    sob = torch.quasirandom.SobolEngine(b.shape[0], scramble=True, seed=int(seed))
    X = b[:, 0] + sob.draw(n, dtype=DTYPE) * (b[:, 1] - b[:, 0])
    return X if extra is None or extra.shape[0] == 0 else torch.cat([X, extra.to(DTYPE)])


def continuous_ptr_posterior(
    gp: ExactGP, Xc: Tensor, W: Tensor, p_w: np.ndarray, h: float, eta: float = 0.0
) -> tuple[PTRPosterior, np.ndarray, np.ndarray]:
    """PTR posterior at candidate designs ``Xc`` and the GP marginals ``(n_x, n_w)``."""
    with torch.no_grad():
        mu, var = gp.posterior(_product(Xc, W))
    mean = mu.numpy().reshape(Xc.shape[0], W.shape[0])
    v = var.numpy().reshape(Xc.shape[0], W.shape[0])
    return ptr_posterior(mean, v, p_w, h, eta), mean, v


@dataclass
class ContinuousPTRResult:
    """Queries and reports of one continuous-design run."""

    X: np.ndarray  # (T, d_x) queried designs
    w_index: np.ndarray  # (T,) queried environment indices
    y: np.ndarray  # (T,)
    reported: np.ndarray  # (T, d_x) reported maximiser after each step
    gp: ExactGP = field(repr=False)


def run_continuous(
    f: Callable[[np.ndarray, np.ndarray], float],
    bounds: np.ndarray,
    W: np.ndarray,
    p_w: np.ndarray,
    h: float,
    iterations: int,
    *,
    method: str = "bpt-ts",
    gp: ExactGP | None = None,
    noise_std: float = 0.01,
    n_candidates: int = 128,
    n_features: int = 1000,
    beta: float = 2.0,
    m: float = 2.0,
    fit_every: int = 0,
    seed: int = 0,
) -> ContinuousPTRResult:
    """Run BPT-TS or BPT-UCB on a continuous design box.

    Parameters
    ----------
    f
        Black box ``f(x, w)`` for one design ``x`` (``(d_x,)``) and environment ``w``
        (``(d_w,)``); noise of std ``noise_std`` is added here.
    bounds
        Design box, ``(d_x, 2)``.
    W, p_w
        Environment grid ``(n_w, d_w)`` and its weights.
    h
        Threshold.
    method
        ``"bpt-ts"`` (RFF function draw) or ``"bpt-ucb"``.
    gp
        Prior model (default: SE kernel, lengthscale 0.5, outputscale 1).
    fit_every
        Refit hyperparameters by marginal likelihood every this many steps (0: never).
    seed
        Seeds candidates, RFF draws, ties and the noise.
    """
    if method not in ("bpt-ts", "bpt-ucb"):
        raise ConfigError(f"continuous PTR supports 'bpt-ts' and 'bpt-ucb', not {method!r}")
    W_t = torch.as_tensor(np.atleast_2d(np.asarray(W, float).T).T, dtype=DTYPE)
    p_w = np.asarray(p_w, float)
    model = gp if gp is not None else ExactGP("se", 0.5, 1.0, noise_std**2)
    ss = np.random.SeedSequence(seed)
    rng, noise_rng = (np.random.default_rng(s) for s in ss.spawn(2))
    gen = torch.Generator().manual_seed(seed)
    d_x = np.asarray(bounds).shape[0]
    Xq = torch.zeros(0, d_x, dtype=DTYPE)
    Zq: list[Tensor] = []
    ys: list[float] = []
    reported, w_idx = [], []
    ucb = BPTUCB(beta=beta, m=m)
    for t in range(iterations):
        Xc = candidate_designs(bounds, n_candidates, seed * 100_003 + t, Xq)
        post, mean, var = continuous_ptr_posterior(model, Xc, W_t, p_w, h)
        if method == "bpt-ucb":
            ix = argmax_random(ucb.acquisition(post), rng)
        else:
            d = d_x + W_t.shape[1]
            rff = RandomFourierFeatures(
                model.kind, model.lengthscale, model.outputscale, d, n_features, gen
            )
            X_tr = (
                model.X_train if model.X_train is not None else torch.zeros(0, d_x + W_t.shape[1])
            )
            y_tr = model.y_train if model.y_train is not None else torch.zeros(0)
            draw = rff_posterior_sample(rff, X_tr, y_tr, model.noise_var, gen, mean=model.mean)
            with torch.no_grad():
                vals = draw(_product(Xc, W_t)).numpy().reshape(Xc.shape[0], -1)
            ix = argmax_random(ptr_of_values(vals, p_w, h), rng)
        iw = select_w(mean[ix], var[ix], h, rng)
        x_t = Xc[ix]
        y = float(f(x_t.numpy(), W_t[iw].numpy())) + noise_std * float(noise_rng.standard_normal())
        z = torch.cat([x_t, W_t[iw]]).unsqueeze(0)
        Zq.append(z)
        ys.append(y)
        model.update(z, torch.tensor([y], dtype=DTYPE))
        if fit_every and (t + 1) % fit_every == 0:
            refit_gen = torch.Generator().manual_seed(seed + t)
            model.fit_hyperparameters(
                torch.cat(Zq), torch.tensor(ys, dtype=DTYPE), generator=refit_gen
            )
        Xq = torch.cat([Xq, x_t.unsqueeze(0)])
        w_idx.append(iw)
        # Report: the queried design with the highest posterior PTR mean (A18).
        post_q, _, _ = continuous_ptr_posterior(model, Xq, W_t, p_w, h)
        reported.append(Xq[argmax_random(post_q.mean, rng)].numpy())
    return ContinuousPTRResult(
        X=Xq.numpy(),
        w_index=np.asarray(w_idx),
        y=np.asarray(ys),
        reported=np.stack(reported),
        gp=model,
    )
