#!/usr/bin/env python
"""GP core benchmark (issue 3): our online SVGP vs a straightforward GPyTorch SVGP, same run.

Reference: ``gpytorch.models.ApproximateGP`` with ``NaturalVariationalDistribution`` +
``VariationalStrategy`` (fixed inducing locations), the graph kernel from a dense
eigendecomposition of the incidence Laplacian, the ELBO via autograd and one
``gpytorch.optim.NGD`` (lr 0.1) + Adam (lr 0.01) step per trip; posterior via ``model(X_all)``.

Ours: :class:`ev_nav.gp.svgp.SVGPModel` with the paper defaults (M = 1000, B = 2500, G = 1).

Both start from the same history (``--warm-trips`` random routes recorded without learning, so
batches are subsampled as in a long run) and then drive the same ``--trips`` measured trips.
Per trip = ``update`` + ``posterior()`` over all segments. Every case runs in a fresh subprocess
with one BLAS thread, so its peak memory (ru_maxrss) and timings are its own.

``--learning-check`` runs the acceptance learning check instead: a ground truth drawn from the
prior on Monaco, 200 trips along random routes, the default SVGP (NGD + Adam each trip) vs BI.

``--floor`` times only the dense float64 algebra one exact trip needs at the same sizes
(:func:`dense_floor`): a lower bound for this formulation on this machine, against which the
per-trip targets can be read.

Usage: python scripts/bench_gp.py [--networks monaco,luxembourg,town100k] [--trips 7]
       python scripts/bench_gp.py --learning-check
       python scripts/bench_gp.py --floor --networks monaco [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ev_nav.cli import count_arg  # noqa: E402 (after the path)

NETWORKS = ("monaco", "luxembourg", "town100k")
#: Our learner's configurations: the paper's defaults (every hyperparameter, κ included, takes an
#: Adam step every trip); κ stepped every 10th trip only; and a cheaper variant whose Adam
#: gradient uses 256 of the batch's distinct segments and which keeps the graph κ fixed.
VARIANTS: dict[str, dict[str, Any]] = {
    "ours": {},
    "ours-kappa10": {"graph_kappa_every": 10},
    "ours-fast": {"hyper_batch_size": 256, "learn_graph_kappa": False},
}


def _load(name: str):
    from ev_nav.gp.testing import LUXEMBOURG_OSM, MONACO_OSM, load_real
    from ev_nav.roads.synthetic import synthetic_town

    if name == "monaco":
        return load_real(MONACO_OSM)
    if name == "luxembourg":
        return load_real(LUXEMBOURG_OSM)
    if name == "town100k":
        return synthetic_town(100_000, seed=0)
    raise SystemExit(f"unknown network {name!r}; use one of {', '.join(NETWORKS)}")


def _trips(net, n: int, length: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from ev_nav.gp.prior import PriorSettings
    from ev_nav.gp.testing import random_route

    rng = np.random.default_rng(seed)
    truth = net.e_det()  # timings do not depend on the values; a prior draw is not needed
    noise = PriorSettings.from_network(net).noise_std
    out = []
    for _ in range(n):
        r = random_route(net, length, rng)
        out.append((r, truth[r] + noise * rng.standard_normal(r.size)))
    return out


# ====================================================================== reference (GPyTorch)
def _reference_model(net, m: int, hist_ids: np.ndarray):
    import gpytorch
    import torch

    from ev_nav.gp.kernels import incidence_laplacian, segment_inputs
    from ev_nav.gp.prior import PriorSettings

    prior = PriorSettings.from_network(net)
    lam, vecs = np.linalg.eigh(incidence_laplacian(net).toarray())

    class GraphKernel(gpytorch.kernels.Kernel):
        def __init__(self) -> None:
            super().__init__(active_dims=torch.tensor([0]))
            self.register_buffer("lam", torch.as_tensor(np.clip(lam, 0, None)))
            self.register_buffer("vecs", torch.as_tensor(vecs))
            self.register_parameter("raw_kappa", torch.nn.Parameter(torch.tensor(0.5413)))
            self.register_constraint("raw_kappa", gpytorch.constraints.Positive())

        def forward(self, x1, x2, diag=False, **kw):
            kappa = self.raw_kappa_constraint.transform(self.raw_kappa)
            s = (4.0 / kappa**2 + self.lam) ** -2.0
            s = s / s.mean()
            u1 = self.vecs[x1[..., 0].long()]
            if diag:
                return (u1 * u1) @ s
            return (u1 * s) @ self.vecs[x2[..., 0].long()].transpose(-1, -2)

    def matern():
        k = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.MaternKernel(
                nu=2.5, ard_num_dims=3, active_dims=torch.tensor([1, 2, 3])
            )
        ).to(torch.float64)
        k.outputscale = prior.outputscale / 2
        return k

    e_det = torch.as_tensor(net.e_det())

    class EdetMean(gpytorch.means.Mean):
        def forward(self, x):
            return e_det[x[..., 0].long()]

    x_all = segment_inputs(net)
    z0 = np.arange(m)

    class Ref(gpytorch.models.ApproximateGP):
        def __init__(self) -> None:
            vd = gpytorch.variational.NaturalVariationalDistribution(m)
            vs = gpytorch.variational.VariationalStrategy(
                self, x_all[z0].clone(), vd, learn_inducing_locations=False
            )
            super().__init__(vs)
            self.mean_module = EdetMean()
            self.covar_module = GraphKernel() * matern() + matern()

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    model = Ref().to(torch.float64)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(torch.float64)
    lik.noise = prior.noise_var
    return model, lik, x_all


class _Reference:
    """The straightforward GPyTorch SVGP learner (Algorithm 3 as one would first write it)."""

    def __init__(self, net, m: int, b: int) -> None:
        import gpytorch
        import torch

        self.net, self.m, self.b = net, min(m, net.n_segments), b
        self.hist_ids: list[np.ndarray] = []
        self.hist_y: list[np.ndarray] = []
        self.visits = np.zeros(net.n_segments, dtype=np.int64)
        self.model, self.lik, self.x_all = _reference_model(net, self.m, np.array([]))
        self.mll = gpytorch.mlls.VariationalELBO(self.lik, self.model, num_data=1)
        self.ngd = gpytorch.optim.NGD(self.model.variational_parameters(), num_data=1, lr=0.1)
        self.adam = torch.optim.Adam(
            [*self.model.hyperparameters(), *self.lik.parameters()], lr=0.01
        )
        self.rng = np.random.default_rng(0)
        self.torch = torch

    def record(self, ids, y) -> None:
        self.hist_ids.append(ids)
        self.hist_y.append(y)
        np.add.at(self.visits, ids, 1)

    def update(self, ids, y) -> None:
        torch = self.torch
        self.record(ids, y)
        z = np.sort(np.argsort(-self.visits, kind="stable")[: self.m])
        self.model.variational_strategy.inducing_points.copy_(self.x_all[z])
        h_ids, h_y = np.concatenate(self.hist_ids), np.concatenate(self.hist_y)
        n = h_ids.size
        idx = self.rng.choice(n, size=min(self.b, n), replace=False)
        self.mll.num_data = n
        self.model.train()
        self.lik.train()
        self.ngd.zero_grad()
        self.adam.zero_grad()
        out = self.model(self.x_all[h_ids[idx]])
        loss = -self.mll(out, torch.as_tensor(h_y[idx]))
        loss.backward()
        self.ngd.step()
        self.adam.step()

    def posterior(self):
        torch = self.torch
        self.model.eval()
        self.lik.eval()
        with torch.no_grad():
            f = self.model(self.x_all)
            return f.mean.numpy(), f.variance.sqrt().numpy()


# ====================================================================== one case per process
def _case(
    impl: str, name: str, trips: int, warm: int, length: int, m: int, b: int, threads: int
) -> dict:
    import torch

    torch.set_num_threads(threads)
    from ev_nav.gp.svgp import SVGPConfig, SVGPModel

    net = _load(name)
    data = _trips(net, warm + trips, length, seed=1)
    t0 = time.perf_counter()
    if impl in VARIANTS:
        cfg = SVGPConfig(num_inducing=m, batch_size=b, **VARIANTS[impl])
        model: Any = SVGPModel(net, config=cfg, seed=0)
        with torch.no_grad():  # kernel set-up: Laplacian, factorisation, diagonal, Z's columns
            model.kernel.graph.graph_diag()
            model.kernel.graph.graph_columns(model.z)
        setup = time.perf_counter() - t0
        model.posterior()
    else:
        model = _Reference(net, m, b)  # kernel set-up: the dense eigendecomposition
        setup = time.perf_counter() - t0
        model.posterior()
    first_posterior = time.perf_counter() - t0 - setup
    for ids, y in data[:warm]:
        model.record(ids, y)
    times = []
    for ids, y in data[warm:]:
        t0 = time.perf_counter()
        model.update(ids, y)
        model.posterior()
        times.append(time.perf_counter() - t0)
    return {
        "impl": impl,
        "network": name,
        "threads": threads,
        "segments": net.n_segments,
        "setup_s": setup,
        "first_posterior_s": first_posterior,
        "trip_s": times,
        "trip_median_s": statistics.median(times),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def _run(args: tuple, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        res = pool.apply_async(_case, args)
        try:
            return res.get(timeout=timeout)
        except mp.TimeoutError:
            return {"impl": args[0], "network": args[1], "timeout_s": timeout}


# ====================================================================== learning check
def learning_check(n_trips: int = 200, seed: int = 0, quiet: bool = False) -> dict:
    """Acceptance check with the default SVGP (NGD + Adam per trip) vs BI on Monaco."""
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    from ev_nav.gp.groundtruth import sample_ground_truth
    from ev_nav.gp.independent import BIModel
    from ev_nav.gp.prior import PriorSettings
    from ev_nav.gp.svgp import SVGPModel
    from ev_nav.gp.testing import random_route

    net = _load("monaco")
    truth = sample_ground_truth(net, seed=seed)
    noise = PriorSettings.from_network(net).noise_std
    rng = np.random.default_rng(seed + 1)
    gp, bi = SVGPModel(net, seed=seed), BIModel(net)
    visited = np.zeros(net.n_segments, dtype=bool)
    for _ in tqdm(range(n_trips), disable=quiet or not sys.stderr.isatty(), desc="trips"):
        route = random_route(net, 40, rng)
        y = truth[route] + noise * rng.standard_normal(route.size)
        gp.update(route, y)
        bi.update(route, y)
        visited[route] = True
    pg, pb = gp.posterior(), bi.posterior()
    un = ~visited
    rmse_gp = float(np.sqrt(np.mean((pg.mean[un] - truth[un]) ** 2)))
    rmse_bi = float(np.sqrt(np.mean((pb.mean[un] - truth[un]) ** 2)))
    return {
        "trips": n_trips,
        "unvisited_segments": int(un.sum()),
        "rmse_unvisited_gp": rmse_gp,
        "rmse_unvisited_bi": rmse_bi,
        "ratio_gp_over_bi": rmse_gp / rmse_bi,
        "coverage_2std_all": float(np.mean(np.abs(pg.mean - truth) <= 2 * pg.std)),
        "learned_kappa": float(gp.kernel.graph.kappa.detach()),
        "learned_noise_std": gp.noise_std,
        "true_noise_std": noise,
    }


# ====================================================================== dense-algebra floor
def dense_floor(n: int, m: int, u: int, threads: int, repeats: int = 5) -> dict[str, float]:
    """Median times [ms] of the dense float64 operations of one exact Algorithm 3 trip.

    Random matrices of the shapes our learner uses (``n`` segments, ``m`` inducing points, ``u``
    distinct segments in the batch): the posterior over all segments, the Cholesky factors of
    ``K_ZZ`` and of q's precision, the NGD target and the Adam adjoints. Kernel evaluations,
    the sparse solves of the graph kernel's columns after a κ step and moving q to a new inducing
    set are left out, so the sum is a lower bound for a trip of this formulation here.
    """
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, m + 50, dtype=torch.float64, generator=g)
    spd = x @ x.T / (m + 50) + 0.1 * torch.eye(m, dtype=torch.float64)
    low = torch.linalg.cholesky(spd)
    rest = torch.randn(m, n - m, dtype=torch.float64, generator=g)
    every = torch.randn(m, n, dtype=torch.float64, generator=g)
    batch = torch.randn(m, u, dtype=torch.float64, generator=g)
    w = torch.rand(u, dtype=torch.float64, generator=g)
    trsm = torch.linalg.solve_triangular
    ops = {
        "Cholesky of K_ZZ": lambda: torch.linalg.cholesky(spd),
        "Cholesky of q's precision": lambda: torch.linalg.cholesky(spd),
        "posterior: L⁻¹K_Z,rest": lambda: trsm(low, rest, upper=False),
        "posterior: C⁻¹A, all segments": lambda: trsm(low, every, upper=False),
        "NGD target: A_b diag(w) A_bᵀ": lambda: (batch * w) @ batch.T,
        "Adam: S a_b": lambda: trsm(low.T, batch, upper=True),
        "Adam: L⁻ᵀĀ": lambda: trsm(low.T, batch, upper=True),
        "Adam: Ā Aᵀ": lambda: batch @ batch.T,
        "Adam: L⁻ᵀΦ L⁻¹ (two solves)": lambda: trsm(
            low, trsm(low.T, spd, upper=True), upper=False, left=False
        ),
    }
    out = {}
    for name, op in ops.items():
        op()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            op()
            times.append(time.perf_counter() - t0)
        out[name] = 1000 * statistics.median(times)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--networks", default="monaco,luxembourg,town100k", help=f"of {', '.join(NETWORKS)}"
    )
    ap.add_argument("--reference-on", default="monaco", help="networks that also run the reference")
    ap.add_argument(
        "--variants", default="ours,ours-kappa10,ours-fast", help=f"of {', '.join(VARIANTS)}"
    )
    ap.add_argument("--trips", type=count_arg, default=7)
    ap.add_argument(
        "--threads", type=count_arg, default=1,
        help="torch threads per case (same for the reference)",
    )
    ap.add_argument("--warm-trips", type=int, default=60)
    ap.add_argument("--route-length", type=int, default=60)
    ap.add_argument("--num-inducing", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=2500)
    ap.add_argument("--timeout", type=float, default=900.0, help="per case [s]")
    ap.add_argument("--learning-check", action="store_true")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="only time the dense algebra of one exact trip (a lower bound) per network",
    )
    ap.add_argument(
        "--floor-batch", type=int, default=1500, help="distinct batch segments for --floor"
    )
    ap.add_argument("--out", default=str(REPO / "runs" / "gp" / "bench_gp.json"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    # checked here: an unknown name used to end a spawned case, and the parent then waited out
    # --timeout (900 s) for its answer
    for option, given, known in (
        ("--networks", args.networks, NETWORKS),
        ("--reference-on", args.reference_on, NETWORKS),
        ("--variants", args.variants, tuple(VARIANTS)),
    ):
        unknown = [n for n in given.split(",") if n and n not in known]
        if unknown:
            ap.error(f"{option}: unknown {', '.join(unknown)}; use {', '.join(known)}")
    from ev_nav.provenance import atomic_write_json, run_metadata

    if args.learning_check:
        res = learning_check(quiet=args.quiet)
        print(json.dumps(res, indent=2))
        out = Path(args.out).with_name("learning_check.json")
        atomic_write_json(out, {"result": res, "metadata": run_metadata(vars(args), seeds=[0, 1])})
        return 0
    if args.floor:
        sizes = {"monaco": 2584, "luxembourg": 5614, "town100k": 103_333}
        for name in args.networks.split(","):
            n = sizes[name]
            m = min(args.num_inducing, n)
            ops = dense_floor(n, m, args.floor_batch, args.threads)
            print(f"{name}: n = {n}, M = {m}, U = {args.floor_batch}, {args.threads} thread(s)")
            for op, ms in ops.items():
                print(f"  {op:32s} {ms:8.1f} ms")
            print(f"  {'sum (lower bound per trip)':32s} {sum(ops.values()):8.1f} ms", flush=True)
        print(f"load average during the run (1, 5, 15 min): {os.getloadavg()}")
        return 0
    results = []
    for name in args.networks.split(","):
        impls = args.variants.split(",")
        impls += ["reference"] if name in args.reference_on.split(",") else []
        row: dict[str, Any] = {"network": name}
        for impl in impls:
            r = _run(
                (
                    impl,
                    name,
                    args.trips,
                    args.warm_trips,
                    args.route_length,
                    args.num_inducing,
                    args.batch_size,
                    args.threads,
                ),
                args.timeout,
            )
            results.append(r)
            row[impl] = r
            if "timeout_s" in r:
                print(f"{name:11s} {impl:12s} did not finish within {r['timeout_s']:.0f} s")
            else:
                print(
                    f"{name:11s} {impl:12s} segments {r['segments']:6d}"
                    f"  kernel set-up {r['setup_s']:7.2f} s"
                    f"  (+ first posterior {r['first_posterior_s']:6.2f} s)"
                    f"  per trip (median of {len(r['trip_s'])}) {1000 * r['trip_median_s']:8.1f} ms"
                    f"  peak {r['peak_rss_gb']:.2f} GB",
                    flush=True,
                )
        ref = row.get("reference", {})
        for impl in impls:
            if impl != "reference" and "trip_median_s" in ref and "trip_median_s" in row[impl]:
                ratio = ref["trip_median_s"] / row[impl]["trip_median_s"]
                print(f"{name:11s} ratio reference/{impl} per trip: {ratio:.1f}x", flush=True)
    print(f"load average during the run (1, 5, 15 min): {os.getloadavg()}")
    atomic_write_json(args.out, {"results": results, "metadata": run_metadata(vars(args))})
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
