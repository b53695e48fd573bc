import numpy as np
import pytest
from hypothesis import given, strategies as st

from fedmm.data import FederatedData


def test_list_input_is_packed_contiguously(rng):
    Xs = [rng.randn(3, 2), rng.randn(5, 2), rng.randn(1, 2)]
    data = FederatedData.from_input(Xs)
    assert data.X.flags.c_contiguous and data.X.dtype == np.float64
    np.testing.assert_array_equal(data.offsets, [0, 3, 8, 9])
    np.testing.assert_array_equal(data.n_samples, [3, 5, 1])
    for k, Xk in enumerate(Xs):
        np.testing.assert_array_equal(data.client(k)[0], Xk)
    assert [a.shape[0] for a in data.split(np.arange(9))] == [3, 5, 1]


def test_the_stored_data_are_a_copy_of_the_callers(rng):
    X = rng.randn(6, 2)
    for data in (FederatedData.from_input(X), FederatedData.from_input([X]),
                 FederatedData.from_input(X, groups=np.zeros(6)), FederatedData.from_input(X, groups=np.arange(6))):
        assert not np.shares_memory(data.X, X) and data.X.flags.c_contiguous


def test_groups_input_sorts_by_client_and_restores_order(rng):
    X = rng.randn(7, 2)
    y = rng.randn(7)
    groups = np.array(["b", "a", "b", "c", "a", "a", "c"])
    data = FederatedData.from_input(X, y, groups=groups)
    np.testing.assert_array_equal(data.client_ids, ["a", "b", "c"])
    np.testing.assert_array_equal(data.n_samples, [3, 2, 2])
    np.testing.assert_array_equal(data.client(0)[0], X[groups == "a"])
    np.testing.assert_array_equal(data.client(1)[1], y[groups == "b"])
    np.testing.assert_array_equal(data.to_caller_order(data.X), X)


@pytest.mark.parametrize("bad, message", [
    (np.nan, "client 1: X contains NaN or infinity in 1 row"),
    (np.inf, "client 1: X contains NaN or infinity"),
])
def test_non_finite_values_name_the_client(rng, bad, message):
    Xs = [rng.randn(4, 2), rng.randn(4, 2)]
    Xs[1][2, 0] = bad
    with pytest.raises(ValueError, match=message):
        FederatedData.from_input(Xs)


def test_non_finite_y_names_the_client(rng):
    y = [rng.randn(4), rng.randn(4)]
    y[0][1] = np.nan
    with pytest.raises(ValueError, match="client 0: y contains NaN"):
        FederatedData.from_input([rng.randn(4, 2), rng.randn(4, 2)], y)


def test_wrong_dimension_names_the_client(rng):
    with pytest.raises(ValueError, match=r"same number of features, 2 .*client 2 has 3"):
        FederatedData.from_input([rng.randn(4, 2), rng.randn(4, 2), rng.randn(4, 3)])


def test_one_dimensional_client_suggests_reshape(rng):
    with pytest.raises(ValueError, match=r"client 0: X must be 2-D.*reshape\(-1, 1\)"):
        FederatedData.from_input([rng.randn(4)])


def test_empty_client_is_refused(rng):
    with pytest.raises(ValueError, match="client 1 has no samples"):
        FederatedData.from_input([rng.randn(4, 2), np.empty((0, 2))])


def test_groups_name_the_client_by_its_id(rng):
    X = rng.randn(6, 2)
    X[4, 1] = np.nan
    with pytest.raises(ValueError, match="client 'x'"):
        FederatedData.from_input(X, groups=["w", "w", "w", "x", "x", "x"])


def test_y_length_mismatch(rng):
    with pytest.raises(ValueError, match="client 0: y must be 1-D with one entry per row"):
        FederatedData.from_input([rng.randn(4, 2)], [rng.randn(3)])
    with pytest.raises(ValueError, match="y is required"):
        FederatedData.from_input([rng.randn(4, 2)], require_y=True)


def test_a_single_array_without_groups_is_one_client(rng):
    """scikit-learn's ``fit(X)``: the rows of one party."""
    X, y = rng.randn(4, 2), rng.randn(4)
    data = FederatedData.from_input(X, y)
    assert data.n_clients == 1 and np.array_equal(data.X, X) and np.array_equal(data.y, y)
    with pytest.raises(ValueError, match="empty list"):
        FederatedData.from_input([])


def test_too_few_samples(rng):
    data = FederatedData.from_input([rng.randn(10, 2), rng.randn(2, 2)])
    with pytest.raises(ValueError, match=r"client 1 \(n=2\) has fewer samples than n_components=3"):
        data.check_components(3, per_client=True)
    with pytest.warns(UserWarning, match="client 1"):
        data.check_components(3, per_client=False)
    with pytest.raises(ValueError, match="12 samples in all cannot fit 13 components"):
        data.check_components(13, per_client=False)


def test_float32_input_is_stored_as_float32_and_anything_else_as_float64(rng):
    X = [rng.randn(5, 2).astype(np.float32), rng.randn(4, 2).astype(np.float32)]
    assert FederatedData.from_input(X).X.dtype == np.float32
    assert FederatedData.from_input([X[0], X[1].astype(np.float64)]).X.dtype == np.float64
    assert FederatedData.from_input([x.astype(int) for x in X]).X.dtype == np.float64


@given(st.lists(st.integers(1, 9), min_size=1, max_size=12), st.data())
def test_a_subset_of_clients_holds_their_rows_in_the_order_asked(sizes, draw):
    """``clients`` (one vectorized gather) gives each asked client's rows, and ``select`` from per-client
    row lists the same data."""
    rng = np.random.RandomState(len(sizes))
    data = FederatedData.from_input([rng.randn(n, 2) for n in sizes])
    index = draw.draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=len(sizes), unique=True))
    subset = data.clients(index)
    np.testing.assert_array_equal(subset.client_ids, np.asarray(index))
    for position, k in enumerate(index):
        np.testing.assert_array_equal(subset.client(position)[0], data.client(k)[0])
    rows = [np.arange(data.offsets[k], data.offsets[k + 1]) for k in index]
    listed = data.select(rows, data.client_ids[index])
    np.testing.assert_array_equal(listed.X, subset.X)
    np.testing.assert_array_equal(listed.offsets, subset.offsets)
    everyone = data.clients(range(len(sizes)))                    # all, in order: the same arrays, no copy
    assert everyone.X is data.X and everyone.offsets is data.offsets and everyone.order is None


def _copies_byte_by_byte(data):
    """The reference of ``copies``: every client's bytes against every earlier client's."""
    first, out = {}, np.full(data.n_clients, -1)
    for k in range(data.n_clients):
        X, y = data.client(k)
        j = first.setdefault((X.tobytes(), None if y is None else y.tobytes()), k)
        out[k] = -1 if j == k else j
    return out


@given(st.lists(st.integers(1, 4), min_size=2, max_size=30), st.data())
def test_copies_are_the_clients_that_repeat_an_earlier_one_byte_for_byte(sizes, draw):
    """Copies, copies of copies, a copy one bit off, the same rows in another order (the same sums)."""
    rng = np.random.RandomState(len(sizes))
    X = [rng.randn(n, 2) for n in sizes]
    y = [rng.randn(n) for n in sizes] if draw.draw(st.booleans()) else None
    for k in draw.draw(st.lists(st.integers(1, len(sizes) - 1), max_size=8)):
        j = draw.draw(st.integers(0, k - 1))
        change = draw.draw(st.sampled_from(["copy", "one bit", "reversed"]))
        X[k] = X[j][::-1].copy() if change == "reversed" else X[j].copy()
        if change == "one bit":
            X[k][0, 0] = np.nextafter(X[k][0, 0], np.inf)
        if y is not None:
            y[k] = y[j][::-1].copy() if change == "reversed" else y[j].copy()
    data = FederatedData.from_input(X, y)
    np.testing.assert_array_equal(data.copies(), _copies_byte_by_byte(data))


@pytest.mark.parametrize("problem, message", [
    (np.nan, "client {}: X contains NaN or infinity in 1 row\\(s\\) \\(first: row {}"),
    (1e200, "client {}: X reaches magnitude 1e\\+200 \\(row {}"),
    ("tiny", "client {}: X \\(feature 1\\) is at most 1e-200"),
])
def test_the_first_client_with_bad_values_is_named_among_thousands(rng, problem, message):
    """The values are checked for all clients at once; the message names the first failing client and the
    row, as the checks client by client did. A feature tiny on one client is caught there, though other
    clients' values of it are ordinary."""
    K = 2000
    groups = np.array([f"k{k}" for k in range(K)])[np.repeat(np.arange(K), 3)][::-1]   # k7's rows: 5976-5978
    X = rng.randn(3 * K, 2)
    for name in ("k9", "k7"):
        if problem == "tiny":
            X[groups == name, 1] = 1e-200
        else:
            X[np.flatnonzero(groups == name)[1], 0] = problem
    with pytest.raises(ValueError, match=message.format("'k7'", "5977 of X")):
        FederatedData.from_input(X, groups=groups)
    with pytest.raises(ValueError, match=message.format(7, "1 of the client's array")):
        FederatedData.from_input([X[groups == f"k{k}"] for k in range(K)])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.longdouble])
def test_responses_of_any_float_precision_are_checked(rng, dtype):
    """``y`` is checked in the precision it comes in (then stored as float64): float16 and longdouble too, which the
    compiled look for tiny values does not read; a response tiny on a whole client is named."""
    X = rng.randn(40, 2)
    y = rng.randn(40).astype(dtype)
    data = FederatedData.from_input([X[:20], X[20:]], [y[:20], y[20:]])
    assert data.y.dtype == np.float64
    if np.finfo(dtype).tiny < 1e-160:              # only longdouble can hold a value below 1 / MAX_MAGNITUDE
        y[20:] = np.asarray(1e-170, dtype=dtype)
        with pytest.raises(ValueError, match="client 1: y"):
            FederatedData.from_input([X[:20], X[20:]], [y[:20], y[20:]])
