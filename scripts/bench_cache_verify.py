"""What verifying a state's cache files costs (issue 32): reading and writing the cached
posterior of a Luxembourg-sized network (LuST, 5,614 segments: one 5,614 × 5,615 float64 array,
252 MB) with the store's SHA-256 check, against the unverified ``np.load`` and atomic
``np.save`` the cache used before.

Prints the median times and the ratios verified/unverified (no timing is asserted anywhere: the
figures in docs/reliability.md are quoted from a full run). ``--quick`` uses a 600-segment
matrix and 3 repeats (the test suite runs it).

    python scripts/bench_cache_verify.py [--quick] [--segments N] [--repeats K]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ev_nav.cli import count_arg
from ev_nav.provenance import atomic_path
from ev_nav.store import StateCache, Store
from ev_nav.store.caches import CHECKSUM

LUXEMBOURG_SEGMENTS = 5_614


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--segments", type=count_arg,
        help=f"matrix size (default {LUXEMBOURG_SEGMENTS:,}, Luxembourg; quick 600)",
    )
    p.add_argument("--repeats", type=count_arg, help="timings a median is of (default 7; quick 3)")
    p.add_argument("--quick", action="store_true", help="600 segments, 3 repeats (unless given)")
    args = p.parse_args()
    n = args.segments or (600 if args.quick else LUXEMBOURG_SEGMENTS)
    repeats = args.repeats or (3 if args.quick else 7)
    rng = np.random.default_rng(0)
    arr = np.asfortranarray(rng.normal(size=(n, n + 1)))  # the posterior's layout: Σ | μ
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        Store.create(state, "bench", "bench", "gp", {}).close()
        cache = StateCache(state)
        plain = state / "plain.npy"
        name = "posterior-bench.npy"

        def read_plain() -> None:
            with open(plain, "rb") as fh:
                np.asfortranarray(np.load(fh, allow_pickle=False))

        def read_verified() -> None:
            assert cache.read_array(name, arr.shape) is not None

        def hash_only() -> None:
            hashlib.new(CHECKSUM, memoryview(arr.reshape(-1, order="F")).cast("B")).hexdigest()

        np.save(plain, arr)
        cache.write_array(name, arr)
        read_plain(), read_verified()  # warm the page cache: both read from memory
        t_read = _median_s(read_plain, repeats)
        t_read_v = _median_s(read_verified, repeats)
        t_hash = _median_s(hash_only, repeats)
        def write_plain() -> None:  # as before verification: atomic, fsynced, no checksum
            with atomic_path(plain, suffix=".npy") as tmp_path, open(tmp_path, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)

        t_write = _median_s(write_plain, repeats)
        t_write_v = _median_s(lambda: cache.write_array(name, arr), repeats)
    mb = arr.nbytes / 1e6
    print(f"matrix {n} x {n + 1} float64 ({mb:,.0f} MB), median of {repeats}, page cache warm")
    print(f"read:  np.load {t_read:.3f} s, verified {t_read_v:.3f} s "
          f"(SHA-256 alone {t_hash:.3f} s, {mb / 1e3 / t_hash:.2f} GB/s)")
    print(f"write: atomic np.save {t_write:.3f} s, verified {t_write_v:.3f} s")
    print(f"verified/unverified read ratio: {t_read_v / t_read:.2f}")
    print(f"verified/unverified write ratio: {t_write_v / t_write:.2f}")


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
