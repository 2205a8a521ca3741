"""Space-filling study of pure density exploration (check 2 of docs/bo-boke.md, the paper's Fig. 3).

Density exploration (DE) queries ``argmin_x W_t(x)`` with Scott's bandwidth
``h_t = t^(-1/(d+4)) / sqrt(12)``; the paper argues its fill distance
``h(X, X_t) = sup_x min_i |x - x_i|`` decays like that of uniform designs. Here the sup is taken
over a scrambled Sobol reference set, and DE is compared with i.i.d. uniform points and a fresh
Latin-hypercube design of each size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import qmc

from ev_nav.bo.boke.surrogate import kr_posterior, scott_bandwidth
from ev_nav.errors import ConfigError


def sobol_reference(d: int, log2_n: int = 15, seed: int = 0) -> torch.Tensor:
    """``2^log2_n`` scrambled Sobol points in ``[0, 1]^d`` (the sup set of the fill distance)."""
    return torch.as_tensor(qmc.Sobol(d, scramble=True, seed=seed).random_base2(log2_n))


def fill_distance(X: torch.Tensor, reference: torch.Tensor, chunk: int = 8192) -> float:
    """``max_j min_i |ref_j - x_i|`` (Euclidean), computed in reference chunks."""
    if X.shape[0] == 0:
        raise ConfigError("fill distance of an empty design is undefined")
    worst = 0.0
    for s in range(0, reference.shape[0], chunk):
        r = reference[s : s + chunk]
        d2 = (r * r).sum(1, keepdim=True) + (X * X).sum(1)[None] - 2.0 * r @ X.T
        worst = max(worst, float(d2.clamp_min(0).min(1).values.max()))
    return worst**0.5


def density_exploration_sequence(
    d: int, n: int, gen: torch.Generator, n_candidates: int = 4000
) -> torch.Tensor:
    """``n`` DE points: one random start, then ``argmin W_t`` over fresh random candidates."""
    X = torch.rand(1, d, generator=gen, dtype=torch.float64)
    zeros = torch.zeros(n, dtype=torch.float64)
    while X.shape[0] < n:
        t = X.shape[0]
        cand = torch.rand(n_candidates, d, generator=gen, dtype=torch.float64)
        logw = kr_posterior(cand, X, zeros[:t], scott_bandwidth(t, d)).log_density
        X = torch.cat([X, cand[int(torch.argmin(logw))][None]])
    return X


@dataclass
class SpaceFillResult:
    """Fill distances ``(n_seeds, len(ts))`` per design method."""

    d: int
    ts: tuple[int, ...]
    seeds: tuple[int, ...]
    fill: dict[str, np.ndarray]

    def mean(self) -> dict[str, list[float]]:
        """Mean fill distance over seeds per method (the paper averages its Fig. 3 curves)."""
        return {k: np.mean(v, axis=0).tolist() for k, v in self.fill.items()}


def spacefill_study(
    d: int,
    ts: Sequence[int] = (20, 50, 100, 200),
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    n_candidates: int = 4000,
    log2_reference: int = 15,
) -> SpaceFillResult:
    """Fill distance of DE, uniform random and LHS designs at sizes ``ts``."""
    ts = tuple(sorted(ts))
    ref = sobol_reference(d, log2_reference)
    fill = {k: np.empty((len(seeds), len(ts))) for k in ("de", "random", "lhs")}
    for i, s in enumerate(seeds):
        gen = torch.Generator().manual_seed(10_000 + s)
        de = density_exploration_sequence(d, ts[-1], gen, n_candidates)
        rnd = torch.rand(ts[-1], d, generator=gen, dtype=torch.float64)
        rng = np.random.default_rng(s)
        for j, t in enumerate(ts):
            lhs = torch.as_tensor(qmc.LatinHypercube(d, seed=rng).random(t))
            fill["de"][i, j] = fill_distance(de[:t], ref)
            fill["random"][i, j] = fill_distance(rnd[:t], ref)
            fill["lhs"][i, j] = fill_distance(lhs, ref)
    return SpaceFillResult(d=d, ts=ts, seeds=tuple(seeds), fill=fill)
