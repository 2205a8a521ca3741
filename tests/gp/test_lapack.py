"""The GIL-releasing LAPACK/BLAS calls give SciPy's wrappers' results to the bit, and let other
threads run meanwhile (the routing server's requests during a model update or refit)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import scipy.linalg as sla
from scipy.linalg.blas import dsyrk

from ev_nav.gp import lapack


@pytest.fixture
def spd() -> np.ndarray:
    a = np.random.default_rng(0).normal(size=(300, 300))
    return a @ a.T + 300 * np.eye(300)


def test_same_bits_as_scipy(spd):
    rng = np.random.default_rng(1)
    factor = np.asfortranarray(spd)
    assert lapack.potrf(factor) == 0
    ref = sla.cholesky(spd, lower=True, check_finite=False)
    np.testing.assert_array_equal(np.tril(factor), ref)
    for b in (rng.normal(size=300), rng.normal(size=(300, 7)), rng.normal(size=(7, 300)).T):
        np.testing.assert_array_equal(
            lapack.trtrs_lower(ref, b), sla.solve_triangular(ref, b, lower=True)
        )
    inv = ref.copy(order="F")
    assert lapack.potri(inv) == 0
    np.testing.assert_array_equal(np.tril(inv), np.tril(sla.lapack.dpotri(ref, lower=1)[0]))
    w = rng.normal(size=(9, 300))
    c1, c2 = np.asfortranarray(spd), np.asfortranarray(spd)
    dsyrk(-1.0, np.asfortranarray(w), beta=1.0, c=c1, trans=1, lower=1, overwrite_c=1)
    np.testing.assert_array_equal(np.tril(lapack.syrk_lower(c2, w)), np.tril(c1))
    full = np.asfortranarray(rng.normal(size=(300, 300)))
    out = lapack.syrk_lower(np.zeros((300, 300), order="F"), full, 1.0, 0.0, trans=False)
    np.testing.assert_array_equal(np.tril(out), np.tril(dsyrk(1.0, full, lower=1)))


def test_not_positive_definite_is_reported(spd):
    bad = np.asfortranarray(-spd)
    assert lapack.potrf(bad) == 1


def test_misuse_is_refused(spd):
    with pytest.raises(ValueError, match="column-major"):
        lapack.potrf(np.ascontiguousarray(spd[:, :299]))
    with pytest.raises(ValueError, match="do not match"):
        lapack.syrk_lower(np.asfortranarray(spd), np.ones((3, 5)))
    with pytest.raises(np.linalg.LinAlgError):
        lapack.trtrs_lower(np.zeros((3, 3)), np.ones(3))


def test_other_threads_run_during_a_factorisation():
    # The main thread runs a little Python while a worker factorises a large matrix (about a
    # second on one core). With the GIL held for the call (SciPy's wrapper) the main thread could
    # not run a single bytecode until the factorisation returned; here it finishes first.
    n = 3000
    a = np.random.default_rng(2).normal(size=(n, n))
    m = np.asfortranarray(a @ a.T + n * np.eye(n))
    started, done = threading.Event(), threading.Event()

    def factorise() -> None:
        started.set()
        lapack.potrf(m)
        done.set()

    worker = threading.Thread(target=factorise)
    worker.start()
    started.wait()
    time.sleep(0.01)  # the worker is inside LAPACK now
    total = sum(i * i for i in range(1000))
    finished_first = not done.is_set()
    worker.join()
    assert total == 332833500
    assert finished_first
