"""The dense LAPACK/BLAS routines of the NumPy learners, called so that other threads keep running.

SciPy's Python wrappers of LAPACK and BLAS (``scipy.linalg.cholesky``, ``solve_triangular``,
``scipy.linalg.blas.dsyrk``) hold Python's global interpreter lock for the whole call. In the
routing server the model writer and the hyperparameter refit run such calls for milliseconds
(an update's SYRK on Monaco) to seconds (the covariance rebuilt after a refit), and every request
thread stopped for as long: measured, a route request waited up to 4.8 s behind a refit while
its median was 39 ms (docs/reliability.md). NumPy's matrix product and torch release the lock;
these wrappers do.

They call the very routines SciPy's wrappers call (``dpotrf``, ``dpotri``, ``dtrtrs``,
``dsyrk`` of the LAPACK/BLAS SciPy is built with, through the function pointers
:mod:`scipy.linalg.cython_lapack` and :mod:`scipy.linalg.cython_blas` export) on the same
column-major data, so the results are the same bits; only the lock is released: a ctypes call
of a C function pointer drops it for the duration of the call. The arrays are checked (dtype,
layout, shapes) before the call, since LAPACK trusts its arguments.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache

import numpy as np
from numpy.typing import NDArray

__all__ = ["potrf", "potri", "syrk_lower", "trtrs_lower"]

_P = ctypes.c_void_p  # every Fortran argument is passed by reference


@cache
def _routine(module_name: str, name: str, n_args: int) -> Callable[..., None]:
    """The C function ``name`` of SciPy's Cython BLAS/LAPACK module, as a ctypes function."""
    import importlib

    module = importlib.import_module(f"scipy.linalg.{module_name}")
    capsule = module.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, get_name(capsule))
    # CFUNCTYPE (not PYFUNCTYPE): ctypes releases the GIL around the call
    return ctypes.CFUNCTYPE(None, *([_P] * n_args))(address)


def _char(c: str) -> ctypes.c_char:
    return ctypes.c_char(c.encode())


def _int(v: int) -> ctypes.c_int:
    return ctypes.c_int(int(v))


def _ref(x: ctypes._SimpleCData) -> ctypes.c_void_p:
    return ctypes.cast(ctypes.pointer(x), ctypes.c_void_p)


def _ptr(a: NDArray[np.float64]) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def _fortran(a: NDArray[np.float64], what: str) -> None:
    if a.dtype != np.float64 or a.ndim != 2 or not a.flags.f_contiguous or not a.flags.writeable:
        raise ValueError(f"internal: {what} must be a writeable column-major float64 matrix")


def potrf(a: NDArray[np.float64]) -> int:
    """Lower Cholesky factor of the SPD matrix ``a`` in place (LAPACK ``dpotrf``; the strict
    upper triangle is left as it was). Returns LAPACK's ``info`` (0: done; k > 0: the leading
    minor of order k is not positive definite)."""
    _fortran(a, "potrf's matrix")
    n = a.shape[0]
    if a.shape[1] != n:
        raise ValueError("internal: potrf needs a square matrix")
    info = _int(0)
    n_c = _int(n)
    _routine("cython_lapack", "dpotrf", 5)(
        _ref(_char("L")), _ref(n_c), _ptr(a), _ref(_int(max(n, 1))), _ref(info)
    )
    return int(info.value)


def potri(chol: NDArray[np.float64]) -> int:
    """``A⁻¹`` from the lower Cholesky factor of ``A``, in place (LAPACK ``dpotri``; the lower
    triangle holds the inverse). Returns LAPACK's ``info``."""
    _fortran(chol, "potri's factor")
    n = chol.shape[0]
    info = _int(0)
    _routine("cython_lapack", "dpotri", 5)(
        _ref(_char("L")), _ref(_int(n)), _ptr(chol), _ref(_int(max(n, 1))), _ref(info)
    )
    return int(info.value)


def trtrs_lower(chol: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """``L⁻¹ b`` for a lower-triangular ``L`` (LAPACK ``dtrtrs``, as ``solve_triangular``
    calls it); ``b`` of shape (n,) or (n, m). Returns a new array (column-major for 2-D)."""
    if chol.dtype != np.float64 or chol.ndim != 2 or chol.shape[0] != chol.shape[1]:
        raise ValueError("internal: trtrs needs a square float64 factor")
    factor = np.asfortranarray(chol)
    vector = b.ndim == 1
    out = np.array(b, dtype=np.float64, order="F", copy=True, ndmin=2)
    if vector:
        out = out.reshape(-1, 1, order="F")
    n, m = out.shape
    if n != factor.shape[0]:
        raise ValueError(f"internal: trtrs shapes {factor.shape} and {b.shape} do not match")
    info = _int(0)
    _routine("cython_lapack", "dtrtrs", 10)(
        _ref(_char("L")), _ref(_char("N")), _ref(_char("N")), _ref(_int(n)), _ref(_int(m)),
        _ptr(factor), _ref(_int(max(n, 1))), _ptr(out), _ref(_int(max(n, 1))), _ref(info),
    )
    if info.value != 0:
        raise np.linalg.LinAlgError(f"singular triangular factor (dtrtrs info {info.value})")
    return out[:, 0] if vector else out


def syrk_lower(
    c: NDArray[np.float64],
    w: NDArray[np.float64],
    alpha: float = -1.0,
    beta: float = 1.0,
    trans: bool = True,
) -> NDArray[np.float64]:
    """``C ← α WᵀW + β C`` (``trans``; ``w`` of shape (k, n)) or ``C ← α W Wᵀ + β C`` (``w`` of
    shape (n, k)) on the lower triangle of the column-major ``c``, in place (BLAS ``dsyrk``:
    half a product's flops)."""
    _fortran(c, "syrk's output")
    wf = np.asfortranarray(w, dtype=np.float64)
    n = wf.shape[1] if trans else wf.shape[0]
    if wf.ndim != 2 or c.shape != (n, n):
        raise ValueError(f"internal: syrk shapes {c.shape} and {w.shape} do not match")
    k = wf.shape[0] if trans else wf.shape[1]
    _routine("cython_blas", "dsyrk", 10)(
        _ref(_char("L")), _ref(_char("T" if trans else "N")), _ref(_int(n)), _ref(_int(k)),
        _ref(ctypes.c_double(alpha)), _ptr(wf), _ref(_int(max(wf.shape[0], 1))),
        _ref(ctypes.c_double(beta)), _ptr(c), _ref(_int(max(n, 1))),
    )
    return c
