import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("fedmm", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("fedmm")


@pytest.fixture
def rng():
    return np.random.RandomState(0)


def kernel_copies(parallel):
    """Run every compiled kernel on its parallel copy whatever the size (``parallel``), or on its serial
    one (:func:`fedmm.threads.parallel_kernel`)."""
    return mock.patch("fedmm.threads.MIN_PARALLEL_WORK", 0 if parallel else sys.maxsize)
