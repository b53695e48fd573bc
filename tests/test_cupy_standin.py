"""The CuPy backend's own branches run without a GPU, through a NumPy-backed stand-in for ``cupy``.

With ``xp = numpy`` the array-module kernels skip their device cache and their copies back to the host
(``if xp is np``), so ``tests/test_backends.py`` never runs them. The stand-in below is imported as
``cupy``: its arrays (:class:`DeviceArray`) hold NumPy arrays but, like CuPy's, refuse to mix with host
arrays (``device + numpy`` and ``numpy.asarray(device)`` raise ``TypeError``), and it counts every
transfer (``asarray`` of a host array, ``asnumpy``). Whole fits with ``backend="cupy"`` then must give
the numpy backend's estimates, move the samples to the "device" once per fit, and return NumPy arrays.
On a machine with CuPy and a GPU the same tests run a second time on the real CuPy, its transfers
counted by a thin wrapper (marked ``gpu``, skipped elsewhere).
"""

import gc
import importlib.util
import sys
import types
import weakref
from pathlib import Path

import numpy as np
import pytest
from numpy.lib.mixins import NDArrayOperatorsMixin

import fedmm.kernels as kernels_module
from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.kernels import GPU_MIN_SAMPLES, get_kernels, resolve_backend
from fedmm.simulate import make_federated_gmm, make_federated_mor


class DeviceArray(NDArrayOperatorsMixin):
    """An array "on the device": a NumPy array inside, that host code cannot read without ``asnumpy``."""

    __slots__ = ("_a", "__weakref__")

    def __init__(self, a):
        assert type(a) is np.ndarray
        self._a = a

    # What CuPy refuses: implicit conversion, and arithmetic with host arrays.
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (stand-in for CuPy).")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or "out" in kwargs:
            return NotImplemented
        return _wrap(getattr(ufunc, method)(*(_unwrap(x) for x in inputs), **kwargs))

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} on a device array (stand-in for CuPy): use the array module.")

    # The ndarray surface the kernels use.
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    dtype = property(lambda self: self._a.dtype)
    size = property(lambda self: self._a.size)
    T = property(lambda self: DeviceArray(self._a.T))

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (_wrap(row) for row in self._a)

    def __getitem__(self, index):
        if isinstance(index, (np.ndarray, DeviceArray)) or (
                isinstance(index, tuple) and any(isinstance(i, (np.ndarray, DeviceArray)) for i in index)):
            raise TypeError("fancy indexing is not used by the kernels")
        return _wrap(self._a[index])

    def __float__(self):
        return float(self._a)  # CuPy allows it on one element (a synchronising copy)

    def __repr__(self):
        return f"DeviceArray({self._a!r})"

    def sum(self, *args, **kwargs):
        return _wrap(self._a.sum(*args, **kwargs))

    def max(self, *args, **kwargs):
        return _wrap(self._a.max(*args, **kwargs))

    def reshape(self, *shape):
        return _wrap(self._a.reshape(*shape))

    def ravel(self):
        return _wrap(self._a.ravel())


def _unwrap(x):
    if isinstance(x, DeviceArray):
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)} mixed with device arrays (stand-in for CuPy).")
    return x  # Python and NumPy scalars, as CuPy accepts


def _wrap(a):
    return DeviceArray(np.asarray(a)) if isinstance(a, (np.ndarray, np.generic)) else a


class StandIn(types.ModuleType):
    """A module that passes for ``cupy``: the calls ``fedmm.kernels`` and ``kernels(xp)`` make."""

    float64, ndarray, __version__ = np.float64, DeviceArray, "stand-in"

    def __init__(self, n_devices=1):
        super().__init__("cupy")
        self.to_device, self.to_host = [], []  # the shapes sent and brought back (not the arrays: kept alive)
        self.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(
            getDeviceCount=lambda: n_devices, getDeviceProperties=lambda i: {"name": b"NumPy stand-in"}))

    def asarray(self, a, dtype=None):
        if isinstance(a, DeviceArray):
            return a if dtype is None or a.dtype == dtype else DeviceArray(a._a.astype(dtype))
        if isinstance(a, np.generic) or not isinstance(a, np.ndarray):
            a = np.asarray(a)
        self.to_device.append(a.shape)
        return DeviceArray(np.array(a, dtype=dtype, copy=True))  # a copy: the host array is not shared

    def asnumpy(self, a):
        if not isinstance(a, DeviceArray):
            raise TypeError("asnumpy of a host array: the kernels should know where their arrays live")
        self.to_host.append(a.shape)
        return a._a.copy()

    @staticmethod
    def _call(fn, *args, **kwargs):
        return _wrap(fn(*args, **kwargs))

    def log(self, a):
        return self._call(np.log, _unwrap(a))

    def exp(self, a):
        return self._call(np.exp, _unwrap(a))

    def ones(self, shape, dtype=float):
        return self._call(np.ones, shape, dtype=dtype)  # made on the device: no transfer

    def broadcast_to(self, a, shape):
        return self._call(np.broadcast_to, _unwrap(a), shape)

    def diagonal(self, a, axis1=0, axis2=1):
        return self._call(np.diagonal, _unwrap(a), axis1=axis1, axis2=axis2)

    def stack(self, arrays, axis=0):
        return self._call(np.stack, [_unwrap(a) for a in arrays], axis=axis)

    def concatenate(self, arrays, axis=0):
        return self._call(np.concatenate, [_unwrap(a) for a in arrays], axis=axis)

    def big_transfers(self, n):
        """The shapes of the host arrays of ``n`` rows sent to the device (the samples; parameters are small)."""
        return [shape for shape in self.to_device if shape and shape[0] == n]


class CountingCupy(types.ModuleType):
    """The real ``cupy`` (on a GPU), its transfers counted as the stand-in counts them."""

    def __init__(self, real):
        super().__init__("cupy")
        self._real, self.ndarray = real, real.ndarray
        self.to_device, self.to_host = [], []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def asarray(self, a, dtype=None):
        if not isinstance(a, self._real.ndarray):
            self.to_device.append(np.shape(a))
        return self._real.asarray(a, dtype=dtype)

    def asnumpy(self, a):
        self.to_host.append(a.shape)
        return self._real.asnumpy(a)

    big_transfers = StandIn.big_transfers


def _real_cupy():
    real = kernels_module.gpu_available() and sys.modules.get("cupy")
    return None if not real else CountingCupy(real)


@pytest.fixture(params=["stand-in", pytest.param("gpu", marks=pytest.mark.gpu)])
def cupy(request, monkeypatch):
    """``cupy`` as fedmm imports it: the stand-in, or the real one on a GPU with its transfers counted; fresh
    kernel caches either way (the device cache dies with the test)."""
    module = StandIn() if request.param == "stand-in" else _real_cupy()
    if module is None:
        pytest.skip("needs CuPy and a GPU")
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setattr(kernels_module, "_cache", {"numpy": kernels_module._numpy})
    return module


@pytest.fixture
def standin(monkeypatch):
    module = StandIn()
    monkeypatch.setitem(sys.modules, "cupy", module)
    monkeypatch.setattr(kernels_module, "_cache", {"numpy": kernels_module._numpy})
    return module


def test_the_stand_in_refuses_what_cupy_refuses(standin):
    host = np.ones(3)
    device = standin.asarray(host)
    for mix in (lambda: device + host, lambda: host * device, lambda: np.asarray(device),
                lambda: np.stack([device, device]), lambda: device @ np.ones((3, 2))):
        with pytest.raises(TypeError):
            mix()
    assert isinstance(device * 2.0 + np.float64(1.0), DeviceArray)
    np.testing.assert_array_equal(standin.asnumpy(standin.exp(device - device)), host)


def test_auto_picks_the_stand_in_at_a_million_samples(standin):
    assert resolve_backend("auto", GPU_MIN_SAMPLES) == "cupy"
    assert resolve_backend("auto", GPU_MIN_SAMPLES - 1) == "numba"
    assert get_kernels("cupy") is get_kernels("cupy")  # built once
    standin.cuda.runtime.getDeviceCount = lambda: 0
    kernels_module._cache.pop("cupy")
    assert resolve_backend("auto", GPU_MIN_SAMPLES) == "numba"
    with pytest.raises(ValueError, match="needs CuPy and a GPU"):
        get_kernels("cupy")


def _on_host(cupy, value, where="fit"):
    """``value`` and everything in it that is an array is a host NumPy array (nothing left on the device)."""
    assert not isinstance(value, cupy.ndarray), where
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _on_host(cupy, v, f"{where}[{i}]")
    return value


def _tolerance(cupy):
    """The stand-in computes as the numpy backend does, but for the expanded distances; cuBLAS sums in
    other orders, and 20 rounds grow the differences."""
    return 1e-9 if isinstance(cupy, StandIn) else 1e-7


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("covariance_type", ["diag", "spherical", "full"])
def test_gaussian_fits_on_the_cupy_backend_equal_the_numpy_backends(cupy, covariance_type):
    X, _ = make_federated_gmm(3, 200, h=0.5, random_state=0)
    n = sum(len(x) for x in X)
    fit = lambda backend: FederatedGaussianMixture(  # noqa: E731
        3, method="fedem", covariance_type=covariance_type, backend=backend, n_init=1, max_iter=20, tol=0.0,
        random_state=0).fit(X)
    ours, reference = fit("cupy"), fit("numpy")
    _on_host(cupy, vars(ours))
    assert ours.n_iter_ == reference.n_iter_ == 20
    rtol = _tolerance(cupy)
    for name in ("means_", "weights_", "covariances_"):
        np.testing.assert_allclose(getattr(ours, name), getattr(reference, name), rtol=rtol, atol=1e-3 * rtol,
                                   err_msg=name)
    # The samples went to the device once for the whole fit (20 rounds and the final scores), and every
    # round's statistics came back to the host.
    assert len(cupy.big_transfers(n)) == 1, cupy.big_transfers(n)
    assert len(cupy.to_host) >= 20
    for result in (ours.predict_proba(X), ours.score_samples(X), ours.predict(X)):  # host arrays too
        assert all(type(r) is np.ndarray for r in (result if isinstance(result, list) else [result]))
    np.testing.assert_allclose(np.concatenate(ours.score_samples(X)), np.concatenate(reference.score_samples(X)),
                               rtol=rtol)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_regression_fit_on_the_cupy_backend_equals_the_numpy_backends(cupy):
    X, y, _ = make_federated_mor(3, 200, random_state=1)
    n = sum(len(x) for x in X)
    fit = lambda backend: FederatedMixtureRegression(  # noqa: E731
        3, method="fedem", backend=backend, n_init=1, max_iter=15, tol=0.0, random_state=0).fit(X, y)
    ours, reference = fit("cupy"), fit("numpy")
    _on_host(cupy, vars(ours))
    rtol = 10 * _tolerance(cupy)  # noise variances feed every round (tests/test_backends.py)
    np.testing.assert_allclose(ours.coef_, reference.coef_, rtol=rtol, atol=1e-3 * rtol)
    np.testing.assert_allclose(ours.weights_, reference.weights_, rtol=rtol, atol=1e-3 * rtol)
    assert len(cupy.big_transfers(n)) == 2  # X and y, once each


def test_the_device_copy_is_reused_while_the_host_array_lives_and_freed_with_it(cupy):
    gpu = get_kernels("cupy")
    rng = np.random.RandomState(0)
    X, offsets = rng.randn(500, 4), np.array([0, 200, 500])
    w, mu, var = rng.dirichlet(np.ones(3), size=2), rng.randn(2, 3, 4), rng.uniform(0.5, 2, (2, 3, 4))
    for _ in range(3):
        out = gpu.gaussian_estep(X, offsets, w, mu, var, "coordinates")
    assert all(type(f) is np.ndarray for f in out)
    assert len(cupy.big_transfers(500)) == 1
    copy = weakref.ref(_device_copy(gpu, X))
    assert len(cupy.big_transfers(500)) == 1  # a cache hit
    del X, out
    gc.collect()
    assert copy() is None  # the cache holds the device copy only while the caller holds the samples
    X2 = rng.randn(500, 4)  # a new array (perhaps at the old address): sent again
    gpu.gaussian_estep(X2, offsets, w, mu, var, "none")
    assert len(cupy.big_transfers(500)) == 2


def _device_copy(gpu, X):
    """The device array the kernels hold for ``X`` (through their :class:`fedmm.kernels._array_module.ArrayModule`,
    the cache the families' kernels share)."""
    return gpu.gaussian_estep.args[0].device(X)


def test_the_gpu_benchmark_runs_through_the_stand_in(standin, capsys):
    """validation/bench_gpu.py's CuPy rows (smoke sizes; the numbers are measured on a GPU, not here)."""
    spec = importlib.util.spec_from_file_location(
        "bench_gpu", Path(__file__).resolve().parents[1] / "validation" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "GPU: NumPy stand-in" in out and "cupy against numba" in out
    assert len(standin.big_transfers(5_000)) == 3  # once per fit: the kernel rounds and two estimator fits
