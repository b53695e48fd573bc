import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("fedmm", deadline=None, max_examples=40, derandomize=True)
settings.load_profile("fedmm")


@pytest.fixture
def rng():
    return np.random.RandomState(0)
