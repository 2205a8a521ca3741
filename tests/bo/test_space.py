"""Mixed parameter spaces: encoding, decoding, validation, snapping, discrete-aware maximising."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from ev_nav.bo.core.maximize import autograd, maximize
from ev_nav.bo.core.space import Categorical, Continuous, Integer, Space, as_space
from ev_nav.errors import ConfigError, EvNavError, OutOfDomainError


def mixed() -> Space:
    return Space([(-2.0, 2.0), Integer(1, 5, "layers"), Categorical(["relu", "tanh", "gelu"])])


def test_layout_and_names() -> None:
    s = mixed()
    assert s.dim == 3 and s.internal_dim == 1 + 1 + 3
    assert s.names == ("x0", "layers", "x2")
    assert s.discrete_mask.tolist() == [False, True, True, True, True]
    assert not s.is_continuous and Space.from_bounds([(0, 1), (2, 3)]).is_continuous
    assert as_space([(0, 1)]) == Space([Continuous(0, 1)])


def test_encode_by_hand() -> None:
    # continuous: (x - lo)/(hi - lo); integer k of 1..5: cell centre (k - 1 + 0.5)/5; one-hot
    U = mixed().encode([[0.5, 3, "tanh"], [2.0, 5.0, "relu"]])
    np.testing.assert_allclose(U, [[0.625, 0.5, 0, 1, 0], [1.0, 0.9, 1, 0, 0]])


def test_round_trip_and_types() -> None:
    s = mixed()
    X = [[-1.25, 1, "gelu"], [0.0, 4, "relu"]]
    back = s.decode(s.encode(X))
    assert back.dtype == object and back.tolist() == X
    assert type(back[1, 1]) is int and type(back[0, 0]) is float
    cont = Space.from_bounds([(0, 10), (-1, 1)])
    out = cont.decode(cont.encode([[2.5, 0.5]]))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [[2.5, 0.5]])


def test_decode_every_internal_point_is_valid_and_snap_is_idempotent() -> None:
    s = mixed()
    U = np.random.default_rng(1).random((500, s.internal_dim))
    X = s.decode(U)
    for row in X:
        s.validate(row)  # never raises
    S = s.snap(U)
    np.testing.assert_array_equal(s.snap(S), S)
    np.testing.assert_array_equal(s.encode(X), S)  # snap == encode(decode(.))
    # each integer value and each category gets an equal share of uniform points
    counts = np.bincount([int(v) for v in X[:, 1]], minlength=6)[1:]
    assert counts.min() > 70 and counts.max() < 130
    cats = {c: int((X[:, 2] == c).sum()) for c in ("relu", "tanh", "gelu")}
    assert min(cats.values()) > 130


def test_integer_cells_reach_end_values() -> None:
    s = Space([Integer(0, 2)])
    assert s.decode([[0.0], [0.33], [0.34], [0.66], [0.67], [1.0]])[:, 0].tolist() == [
        0,
        0,
        1,
        1,
        2,
        2,
    ]


def test_snap_torch_keeps_type() -> None:
    s = mixed()
    Z = torch.rand(4, s.internal_dim, dtype=torch.float64)
    S = s.snap(Z)
    assert isinstance(S, torch.Tensor) and S.dtype == torch.float64
    np.testing.assert_array_equal(S.numpy(), s.snap(Z.numpy()))


@pytest.mark.parametrize(
    ("point", "fragment"),
    [
        ([2.5, 3, "relu"], "x0 = 2.5 is outside [-2.0, 2.0]"),
        ([0.0, 2.5, "relu"], "layers = 2.5 is not a whole number"),
        ([0.0, 6, "relu"], "layers = 6 is outside [1, 5]"),
        ([0.0, 3, "sigmoid"], "x2 = 'sigmoid' is not one of its choices"),
        ([0.0, 3], "a point needs 3 values"),
        (["a", 3, "relu"], "x0 = 'a' is not a number"),
        ([float("nan"), 3, "relu"], "is not finite"),
    ],
)
def test_validate_names_the_parameter(point: list[object], fragment: str) -> None:
    with pytest.raises(OutOfDomainError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        mixed().validate(point)
    assert issubclass(OutOfDomainError, EvNavError)


def test_validate_slack_clips_to_bound() -> None:
    s = Space.from_bounds([(0.0, 1.0)])
    assert s.validate([1.0 + 1e-12])[0] == 1.0
    with pytest.raises(OutOfDomainError):
        s.validate([1.0 + 1e-6])


@pytest.mark.parametrize(
    "bad",
    [
        lambda: [(1.0, 0.0)],
        lambda: [Integer(2, 2)],
        lambda: [Integer(0.5, 3)],
        lambda: [Categorical(["a"])],
        lambda: [Categorical(["a", "a"])],
        lambda: [Categorical("ab")],
        lambda: [Categorical([(1, 2), (3, 4)])],
        lambda: [Continuous(0, 1, "a"), Continuous(0, 1, "a")],
        lambda: [],
        lambda: ["nope"],
    ],
)
def test_bad_declarations(bad: Callable[[], list[object]]) -> None:
    with pytest.raises(ConfigError):
        Space(bad())  # type: ignore[arg-type]


def test_discrete_objective_maximiser_returns_valid_optimum() -> None:
    # f = -(x - 0.3)^2 - (layers - 4)^2 / 10 + [act == "tanh"]: the optimum is (0.3, 4, tanh);
    # the relaxed optimum of the one-hot block would be anywhere inside it
    s = mixed()

    def f(Z: torch.Tensor) -> torch.Tensor:
        x = -2.0 + 4.0 * Z[:, 0]
        layers = 1.0 + 5.0 * Z[:, 1] - 0.5
        return -((x - 0.3) ** 2) - (layers - 4.0) ** 2 / 10.0 + Z[:, 3] - 0.5 * Z[:, 2]

    calls: list[torch.Tensor] = []

    def spy(Z: torch.Tensor) -> torch.Tensor:
        calls.append(Z.detach().clone())
        return f(Z)

    best = maximize(
        s.discrete_objective(autograd(spy)),
        s.internal_dim,
        torch.Generator().manual_seed(0),
        n_raw=256,
        n_starts=4,
        maxiter=50,
    )
    # every evaluation was at a valid (snapped) point
    for Z in calls:
        np.testing.assert_array_equal(s.snap(Z.numpy()), Z.numpy())
    x = s.decode(s.snap(best.x))[0]
    assert x[1] == 4 and x[2] == "tanh"
    assert abs(x[0] - 0.3) < 1e-4
    assert best.value == pytest.approx(float(f(torch.as_tensor(s.snap(best.x))[None])), abs=1e-12)


def test_continuous_space_leaves_objective_alone() -> None:
    s = Space.from_bounds([(0, 1)])
    obj = autograd(lambda Z: -Z[:, 0])
    assert s.discrete_objective(obj) is obj


def test_bounds_property() -> None:
    assert mixed().bounds == ((-2.0, 2.0), (1.0, 5.0), (0.0, 2.0))


def test_user_objective_declares_a_mixed_space() -> None:
    from ev_nav.bo import objective
    from ev_nav.bo.core.objective import UserObjective

    @objective(bounds=[(0.0, 1.0), Integer(1, 4), Categorical(["a", "b"])])
    def f(x: np.ndarray) -> float:
        return float(x[0]) + x[1] + (x[2] == "b")

    user = UserObjective(f, f.__bo_objective__["bounds"], "f")  # type: ignore[attr-defined]
    assert user.dim == 3 and user.space.internal_dim == 4
    x = user.space.decode(user.space.encode([[0.5, 3, "b"]]))[0]
    assert user(x) == 4.5
    with pytest.raises(ConfigError, match="integer or categorical"):
        user.lower  # noqa: B018
    # a continuous declaration reads as before, however it was written
    plain = UserObjective(f, [Continuous(0, 1), (2, 3)], "g")
    assert plain.bounds == ((0.0, 1.0), (2.0, 3.0))
    np.testing.assert_allclose(plain.from_unit([0.5, 0.5]), [0.5, 2.5])
