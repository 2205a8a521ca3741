"""Objective functions and simulators of the cost-varying-subset BO experiments.

Every objective is a plain, vectorised, differentiable torch function of unit-cube inputs
``u`` of shape ``(n, d)`` returning ``(n,)`` float64 values to be **maximised**. Known optima are
module constants. The two simulators (plant growth, airfoil self-noise) are GP posterior means whose
fitted parameters are read from ``../shared/data/*.npz`` (never copied into the repository).

Sources: Tay et al. (NeurIPS 2023) and Hoang et al. (AAAI 2025); parameter values are the ones of
the standard test functions and of the authors' published simulator fits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ev_nav.errors import ConfigError, NetworkFileNotFound
from ev_nav.gp.exact import stationary_kernel

DTYPE = torch.float64
Objective = Callable[[Tensor], Tensor]

#: Folder holding the simulator parameters; override with ``EV_NAV_SHARED_DATA``.
DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"


def data_dir() -> Path:
    """The shared data folder (``$EV_NAV_SHARED_DATA`` or ``<repo>/../shared/data``)."""
    env = os.environ.get("EV_NAV_SHARED_DATA")
    return Path(env) if env else DEFAULT_DATA_DIR


def _check_input(u: Tensor, dim: int, name: str) -> Tensor:
    u = torch.as_tensor(u, dtype=DTYPE)
    if u.ndim != 2 or u.shape[1] != dim:
        raise ConfigError(f"{name} expects inputs of shape (n, {dim}); got {tuple(u.shape)}")
    return u


# ------------------------------------------------------------------------------- Hartmann
_H3_ALPHA = torch.tensor([1.0, 1.2, 3.0, 3.2], dtype=DTYPE)
_H3_A = torch.tensor(
    [[3.0, 10.0, 30.0], [0.1, 10.0, 35.0], [3.0, 10.0, 30.0], [0.1, 10.0, 35.0]], dtype=DTYPE
)
_H3_P = 1e-4 * torch.tensor(
    [[3689, 1170, 2673], [4699, 4387, 7470], [1091, 8732, 5547], [381, 5743, 8828]], dtype=DTYPE
)
HARTMANN3_MAX = 3.86278
HARTMANN3_ARGMAX = (0.114614, 0.555649, 0.852547)

_H6_A = torch.tensor(
    [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ],
    dtype=DTYPE,
)
_H6_P = 1e-4 * torch.tensor(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ],
    dtype=DTYPE,
)
HARTMANN6_MAX = 3.32237
HARTMANN6_ARGMAX = (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573)


def _hartmann(u: Tensor, A: Tensor, P: Tensor) -> Tensor:
    inner = (A * (u[:, None, :] - P) ** 2).sum(-1)  # (n, 4)
    return (_H3_ALPHA * torch.exp(-inner)).sum(-1)


def hartmann3(u: Tensor) -> Tensor:
    """Negated Hartmann-3 on ``[0,1]^3`` (max :data:`HARTMANN3_MAX`)."""
    return _hartmann(_check_input(u, 3, "hartmann3"), _H3_A, _H3_P)


def hartmann6(u: Tensor) -> Tensor:
    """Negated Hartmann-6 on ``[0,1]^6`` (max :data:`HARTMANN6_MAX`)."""
    return _hartmann(_check_input(u, 6, "hartmann6"), _H6_A, _H6_P)


def hartmann6_12d(u: Tensor) -> Tensor:
    """Hartmann-6 on the first six of twelve inputs; inputs 7–12 are dummies."""
    return hartmann6(_check_input(u, 12, "hartmann6_12d")[:, :6])


# ------------------------------------------------------------------------------- Ackley, Levy
ACKLEY_MAX = 0.0
LEVY_MAX = 0.0


def ackley6(u: Tensor) -> Tensor:
    """Negated Ackley-6 on ``[-32.768, 32.768]^6`` mapped to ``[0,1]^6`` (max 0 at u = 0.5)."""
    z = 65.536 * _check_input(u, 6, "ackley6") - 32.768
    # clamp_min keeps the gradient of the square root finite at the optimum
    rms = torch.sqrt((z * z).mean(-1).clamp_min(1e-30))
    return (
        20.0 * torch.exp(-0.2 * rms)
        + torch.exp(torch.cos(2 * math.pi * z).mean(-1))
        - 20.0
        - (math.e)
    )


def levy6(u: Tensor) -> Tensor:
    """Negated Levy-6 on ``[-10, 10]^6`` mapped to ``[0,1]^6`` (max 0 at u = 0.55)."""
    z = 20.0 * _check_input(u, 6, "levy6") - 10.0
    w = 1.0 + (z - 1.0) / 4.0
    head = torch.sin(math.pi * w[:, 0]) ** 2
    mid = ((w[:, :-1] - 1.0) ** 2 * (1.0 + 10.0 * torch.sin(math.pi * w[:, :-1] + 1.0) ** 2)).sum(
        -1
    )
    tail = (w[:, -1] - 1.0) ** 2 * (1.0 + torch.sin(2 * math.pi * w[:, -1]) ** 2)
    return -(head + mid + tail)


def ackley6_12d(u: Tensor) -> Tensor:
    """Ackley-6 on the first six of twelve inputs."""
    return ackley6(_check_input(u, 12, "ackley6_12d")[:, :6])


def levy6_12d(u: Tensor) -> Tensor:
    """Levy-6 on the first six of twelve inputs."""
    return levy6(_check_input(u, 12, "levy6_12d")[:, :6])


# ------------------------------------------------------------------------------- GP sample
@dataclass(frozen=True)
class KernelInterpolant:
    """``f(u) = c + k(u, P) w``: a GP posterior mean / kernel interpolant, as a callable.

    Attributes
    ----------
    kind, lengthscale, outputscale
        Kernel of the interpolant.
    points
        Anchor inputs ``P`` (in the kernel's input units).
    weights
        Coefficients ``w``.
    constant
        Constant offset ``c``.
    lower, upper
        Affine map from the unit cube to the kernel's input units (``x = lower + u (upper-lower)``).
    """

    kind: str
    lengthscale: Tensor
    outputscale: float
    points: Tensor
    weights: Tensor
    constant: float = 0.0
    lower: Tensor | None = None
    upper: Tensor | None = None

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def __call__(self, u: Tensor) -> Tensor:
        u = _check_input(u, self.dim, "kernel interpolant")
        x = u if self.lower is None else self.lower + u * (self.upper - self.lower)
        K = stationary_kernel(self.kind, x, self.points, self.lengthscale, self.outputscale)
        return self.constant + K @ self.weights


def gp_sample_objective(
    generator: torch.Generator,
    dim: int = 3,
    n_points: int = 1000,
    lengthscale: float = 0.1,
    jitter: float = 1e-6,
) -> KernelInterpolant:
    """A smooth stand-in for a GP prior draw on ``[0,1]^dim`` (SE kernel, outputscale 1).

    Draws ``n_points`` uniform anchors ``P``, ``v ~ N(0, K + jitter I)`` and returns the
    interpolant ``f(u) = k(u, P) (K + jitter I)^{-1} v``. Because ``v = L z``, the weights are
    ``L^{-T} z``.
    """
    P = torch.rand(n_points, dim, dtype=DTYPE, generator=generator)
    ls = torch.full((dim,), float(lengthscale), dtype=DTYPE)
    K = stationary_kernel("se", P, P, ls, 1.0) + jitter * torch.eye(n_points, dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    z = torch.randn(n_points, dtype=DTYPE, generator=generator)
    w = torch.linalg.solve_triangular(L.T, z.unsqueeze(-1), upper=True).squeeze(-1)
    return KernelInterpolant("se", ls, 1.0, P, w)


# ------------------------------------------------------------------------------- simulators
PLANT_MAX = 2.1941161755890883


def _load_npz(name: str, path: str | os.PathLike[str] | None) -> dict[str, np.ndarray]:
    file = Path(path) if path is not None else data_dir() / name
    if not file.is_file():
        raise NetworkFileNotFound(
            f"simulator parameters {file} not found; point EV_NAV_SHARED_DATA at the folder "
            f"holding {name} (the shared data folder next to the repository)"
        )
    with np.load(file, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def load_plant(path: str | os.PathLike[str] | None = None) -> KernelInterpolant:
    """Plant-growth simulator: the whitened SVGP latent mean ``k(x, Z) L^{-T} q_mu`` (5-D).

    Inputs are Ca, B, NH3, K (log µM) and pH, mapped from the unit cube to their native boxes;
    the output is standardised maximum leaf area (max :data:`PLANT_MAX`).
    """
    p = _load_npz("plant_svgp_mean_params.npz", path)
    Z = torch.as_tensor(p["Z"], dtype=DTYPE)
    ls = torch.as_tensor(p["lengthscales"], dtype=DTYPE)
    var = float(p["kernel_variance"])
    K = stationary_kernel("se", Z, Z, ls, var)
    K = K + float(p["jitter"]) * torch.eye(Z.shape[0], dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    q = torch.as_tensor(p["q_mu"], dtype=DTYPE).reshape(-1, 1)
    w = torch.linalg.solve_triangular(L.T, q, upper=True).squeeze(-1)
    return KernelInterpolant(
        "se",
        ls,
        var,
        Z,
        w,
        lower=torch.as_tensor(p["lower"], dtype=DTYPE),
        upper=torch.as_tensor(p["upper"], dtype=DTYPE),
    )


def load_airfoil(path: str | os.PathLike[str] | None = None) -> KernelInterpolant:
    """Airfoil self-noise simulator: posterior mean of a Matérn-5/2 ARD GP over 1503 points (5-D).

    ``f(x) = c + k(x, X)(K + σ_n² I)^{-1}(y − c)`` with the fitted hyperparameters; inputs are the
    preprocessed (log, min-max scaled) UCI variables, so the unit cube is the native domain.
    """
    p = _load_npz("airfoil_gp_mean_params.npz", path)
    if float(p["nu"]) != 2.5:
        raise ConfigError("airfoil parameters must describe a Matérn-5/2 kernel")
    X = torch.as_tensor(p["X"], dtype=DTYPE)
    y = torch.as_tensor(p["y"], dtype=DTYPE)
    ls = torch.as_tensor(p["lengthscales"], dtype=DTYPE)
    s = float(p["outputscale"])
    c = float(p["constant_mean"])
    K = stationary_kernel("matern52", X, X, ls, s) + float(p["noise"]) * torch.eye(
        X.shape[0], dtype=DTYPE
    )
    L = torch.linalg.cholesky(K)
    w = torch.cholesky_solve((y - c).unsqueeze(-1), L).squeeze(-1)
    return KernelInterpolant("matern52", ls, s, X, w, constant=c)
