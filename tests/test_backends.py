"""Fast backends against the numpy reference (the oracle)."""

import numpy as np
import pytest
from conftest import COPIES, kernel_copies
from hypothesis import given, strategies as st

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.kernels import _numpy as reference, get_kernels, gpu_available, resolve_backend
from fedmm.kernels._array_module import kernels as array_module_kernels
from fedmm.kernels._compiled import PIECE, _pieces
from fedmm.simulate import make_federated_gmm, make_federated_mor

numba_kernels = get_kernels("numba")
numpy_module_kernels = array_module_kernels(np)


@st.composite
def problems(draw):
    """Clients of uneven size (some larger than one Numba piece), random or extreme parameters."""
    seed = draw(st.integers(0, 10 ** 6))
    rng = np.random.RandomState(seed)
    sizes = draw(st.lists(st.integers(1, 5000), min_size=1, max_size=4))
    R, d = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    scale = draw(st.sampled_from([1.0, 1e3, 1e6]))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    X = scale * rng.randn(offsets[-1], d)
    y = scale * rng.randn(offsets[-1])
    K = len(sizes)
    weights = rng.dirichlet(np.ones(R), size=K)
    if draw(st.booleans()):
        weights[:, 0] = 1e-300  # a nearly empty component
        weights /= weights.sum(axis=1, keepdims=True)
    theta = scale * rng.randn(K, R, d)
    s = draw(st.sampled_from([1, d, d * d]))
    if s == d * d:  # full covariances, positive definite with condition numbers up to ~20
        A = rng.randn(K, R, d, d)
        variances = (A @ np.swapaxes(A, -1, -2) / d + 0.2 * np.eye(d)).reshape(K, R, s) * scale ** 2
    else:
        variances = rng.uniform(0.5, 2.0, size=(K, R, s)) * scale ** 2
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    return X.astype(dtype), y.astype(dtype), offsets, weights, theta, variances


def _copies(X, parallel):
    """The kernel copies to check on these data: both for float64, the serial one for float32. The two
    copies are one source (``prange`` read as ``range``), so the dtypes' cross with the copies adds no
    check, and compiling the parallel copies for float32 would cost a fresh test run about 30 s."""
    return kernel_copies(parallel and X.dtype == np.float64)


def _assert_close(a, b, what):
    for x, y in zip(a, b):
        if x is None:
            assert y is None, what
            continue
        # Sums over up to 2e4 samples, each term exact to ~1e-16 relative to its own size.
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-9 * (1.0 + np.abs(y).max()), err_msg=what)


@COPIES
@given(problems(), st.sampled_from(["none", "coordinates", "total", "outer"]))
def test_numba_gaussian_agrees_with_the_reference(parallel, problem, squares):
    X, _, offsets, w, mu, var = problem
    with _copies(X, parallel):
        _assert_close(numba_kernels.gaussian_estep(X, offsets, w, mu, var, squares),
                      reference.gaussian_estep(X, offsets, w, mu, var, squares), "gaussian_estep")
        _assert_close(numba_kernels.gaussian_log_resp(X, offsets, w, mu, var),
                      reference.gaussian_log_resp(X, offsets, w, mu, var), "gaussian_log_resp")


@COPIES
@given(problems(), st.sampled_from(["none", "coordinates", "total", "outer"]), st.booleans())
def test_numba_stats_from_responsibilities_agree_with_the_reference(parallel, problem, squares, hard):
    """The starts' sums (k-means labels: one-hot, or soft responsibilities)."""
    X, _, offsets, w, mu, var = problem
    resp = np.exp(reference.gaussian_log_resp(X, offsets, w, mu, var)[1])
    if hard:
        resp = np.eye(resp.shape[1])[resp.argmax(axis=1)]
    with _copies(X, parallel):
        _assert_close(numba_kernels.gaussian_stats(X, offsets, resp, squares),
                      reference.gaussian_stats(X, offsets, resp, squares), "gaussian_stats")


@COPIES
@given(problems())
def test_numba_regression_agrees_with_the_reference(parallel, problem):
    X, y, offsets, w, coef, var = problem
    noise = var[..., :1]
    coef = coef / np.abs(coef).max()  # fitted values of the size of y
    with _copies(X, parallel):
        _assert_close(numba_kernels.regression_estep(X, y, offsets, w, coef, noise),
                      reference.regression_estep(X, y, offsets, w, coef, noise), "regression_estep")
        _assert_close(numba_kernels.regression_log_resp(X, y, offsets, w, coef, noise),
                      reference.regression_log_resp(X, y, offsets, w, coef, noise), "regression_log_resp")


@given(st.integers(0, 10 ** 6), st.sampled_from([np.float64, np.float32]))
def test_array_module_path_agrees_with_the_reference(seed, dtype):
    """The CuPy code run with numpy; ordinary scales (its expanded distances lose digits at 1e6)."""
    rng = np.random.RandomState(seed)
    offsets = np.array([0, 40, 41, 300])
    X, y = rng.randn(300, 3).astype(dtype), rng.randn(300).astype(dtype)
    w = rng.dirichlet(np.ones(4), size=3)
    theta = 2 * rng.randn(3, 4, 3)
    var = rng.uniform(0.5, 2.0, (3, 4, 3))
    A = rng.randn(3, 4, 3, 3)
    full = (A @ np.swapaxes(A, -1, -2) / 3 + 0.5 * np.eye(3)).reshape(3, 4, 9)
    for name, args in [("gaussian_estep", (X, offsets, w, theta, var, "coordinates")),
                       ("gaussian_estep", (X, offsets, w, theta, var[..., :1], "total")),
                       ("gaussian_estep", (X, offsets, w, theta, full, "outer")),
                       ("gaussian_log_resp", (X, offsets, w, theta, full)),
                       ("gaussian_log_resp", (X, offsets, w, theta, var)),
                       ("regression_estep", (X, y, offsets, w, theta, var[..., :1])),
                       ("regression_log_resp", (X, y, offsets, w, theta, var[..., :1]))]:
        _assert_close(getattr(numpy_module_kernels, name)(*args), getattr(reference, name)(*args), name)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("method", ["fedgrem", "local-em", "pooled-grem"])
def test_estimators_give_the_same_fit_on_every_cpu_backend(method):
    X, truth = make_federated_gmm(4, 300, h=0.5, random_state=0)
    fits = [FederatedGaussianMixture(5, method=method, backend=b, n_init=2, max_iter=50, random_state=0).fit(X)
            for b in ("numpy", "numba")]
    np.testing.assert_allclose(fits[0].means_, fits[1].means_, rtol=1e-7, atol=1e-9)
    Xr, y, _ = make_federated_mor(3, 200, random_state=1)
    regs = [FederatedMixtureRegression(5, method=method, backend=b, n_init=2, max_iter=30, random_state=0).fit(Xr, y)
            for b in ("numpy", "numba")]
    # Estimated noise variances feed every round (and FedGrEM's noise units): kernel differences of 1e-12
    # grow over 30 unconverged rounds to about 1e-7, still far below any statistical difference.
    np.testing.assert_allclose(regs[0].coef_, regs[1].coef_, rtol=1e-6, atol=1e-9)


def test_backend_selection():
    assert resolve_backend("auto", 100) == "numba"
    assert resolve_backend("numpy", 10 ** 9) == "numpy"
    with pytest.raises(ValueError, match="Unknown backend"):
        resolve_backend("tpu", 10)
    if not gpu_available():
        with pytest.raises(ValueError, match="needs CuPy and a GPU"):
            get_kernels("cupy")


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a GPU")
def test_cupy_agrees_with_the_reference_on_a_gpu():
    cupy_kernels = get_kernels("cupy")
    rng = np.random.RandomState(0)
    offsets = np.array([0, 100_000, 250_000])
    X = rng.randn(250_000, 10)
    w = rng.dirichlet(np.ones(5), size=2)
    theta, var = rng.randn(2, 5, 10), rng.uniform(0.5, 2, (2, 5, 1))
    _assert_close(cupy_kernels.gaussian_estep(X, offsets, w, theta, var, "total"),
                  reference.gaussian_estep(X, offsets, w, theta, var, "total"), "cupy gaussian_estep")


def test_the_vectorized_exponential_matches_numpys():
    """exp on x <= 0 to 1e-15 relative down to the smallest normal number, gradual underflow below it (to
    within one unit of the smallest subnormal), exp(0) = 1 exactly, and 0 for -inf."""
    from numba import njit

    from fedmm.kernels._compiled import _exp_block

    @njit
    def exp_block(z):
        out = z.copy()
        _exp_block(out, len(out), np.empty(2 * len(out), dtype=np.int64))
        return out

    z = np.concatenate([-np.logspace(-12, np.log10(740), 20000), np.linspace(-760, 0, 20001), [0.0, -np.inf]])
    ours, theirs = exp_block(z), np.exp(z)
    normal = theirs >= np.finfo(float).tiny
    np.testing.assert_allclose(ours[normal], theirs[normal], rtol=1e-15, atol=0)
    np.testing.assert_allclose(ours[~normal], theirs[~normal], rtol=0, atol=5e-324)
    assert exp_block(np.zeros(3))[0] == 1.0 and ours[-1] == 0.0


@given(st.lists(st.sampled_from([0, 1, 5, 4095, 4096, 4097, 12288]), min_size=1, max_size=20))
def test_pieces_cut_every_client_into_consecutive_runs_of_at_most_PIECE_samples(sizes):
    """The Numba kernels' work units: each client's rows in order, cut every PIECE rows, none for an empty
    client, each piece owned by its client (the kernels' per-client sums rely on all of it)."""
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
    starts, ends, owners = _pieces(offsets)
    for k, n in enumerate(sizes):
        mine = owners == k
        expected = np.arange(offsets[k], offsets[k + 1], PIECE)
        np.testing.assert_array_equal(starts[mine], expected)
        np.testing.assert_array_equal(ends[mine], np.minimum(expected + PIECE, offsets[k + 1]))
    assert np.all(np.diff(owners) >= 0) and len(owners) == sum(-(-n // PIECE) for n in sizes)
