import sys
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("fedmm", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("fedmm")


@pytest.fixture
def rng():
    return np.random.RandomState(0)


#: Both copies of the compiled kernels (:func:`fedmm.threads.parallel_kernel`): the serial one in every run;
#: the parallel one in CI's own step, ``pytest -m parallel_copies``, because compiling it (about a minute and
#: a half next to two busy processes) would take the default run on a busy two-core machine past five minutes.
COPIES = pytest.mark.parametrize("parallel", [False, pytest.param(True, marks=pytest.mark.parallel_copies)])


@pytest.fixture(autouse=True)
def serial_kernels(request, monkeypatch):
    """Outside CI's own step every test runs the kernels' serial copies, whatever its size: a parallel copy
    takes 3-15 s to compile for each signature, which a fresh clone's default run would pay in full. Tests of
    the threshold itself (``own_threshold``) keep fedmm's."""
    if not any(request.node.get_closest_marker(m) for m in ("parallel_copies", "own_threshold")):
        monkeypatch.setattr("fedmm.threads.MIN_PARALLEL_WORK", sys.maxsize)


@contextmanager
def kernel_copies(parallel):
    """Run every compiled kernel on its parallel copy whatever the size and however busy the machine
    (``parallel``), or on its serial one (:func:`fedmm.threads.parallel_kernel`)."""
    with mock.patch("fedmm.threads.MIN_PARALLEL_WORK", 0 if parallel else sys.maxsize), \
            mock.patch("fedmm.threads._idle_cores", lambda: sys.maxsize):
        yield


def experimental_fedgrem(**options):
    """FedGrEM with options of the research record, outside its API (validation/experimental.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
    try:
        from experimental import ExperimentalFedGrEM
    finally:
        sys.path.pop(0)
    return ExperimentalFedGrEM(**options)
