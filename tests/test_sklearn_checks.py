"""scikit-learn's estimator checks on both estimators, with their default method and with pooled EM.

A single array without ``groups`` is one client (``docs/selection.md``), so the checks' ``fit(X)`` fits one
party. Expected failures, each with its reason, are listed below (and in ``docs/models.md`` and the regression
estimator's docstring); every other check must pass, and each expected failure must fail for its reason.
"""

import warnings
from functools import partial

import pytest
from sklearn.utils.estimator_checks import estimator_checks_generator, parametrize_with_checks

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression

#: A mixture of regressions' posterior and density are of ``y`` given ``x``: ``predict_proba(X, y)`` and
#: ``score_samples(X, y)`` need ``y``, and these checks call them with ``X`` alone.
NEEDS_Y = "predict_proba and score_samples of a mixture of regressions need y (densities of y given x)"
REGRESSION_EXPECTED = {name: NEEDS_Y for name in (
    "check_estimators_unfitted", "check_n_features_in_after_fitting", "check_estimators_dtypes",
    "check_estimators_pickle", "check_methods_sample_order_invariance", "check_methods_subset_invariance",
    "check_dict_unchanged", "check_fit_idempotent", "check_fit2d_predict1d")}

ESTIMATORS = [FederatedGaussianMixture(max_iter=20, random_state=0),
              FederatedGaussianMixture(method="pooled-em", max_iter=20, random_state=0),
              FederatedMixtureRegression(max_iter=20, random_state=0),
              FederatedMixtureRegression(method="pooled-em", max_iter=20, random_state=0)]


def _expected(estimator):
    return REGRESSION_EXPECTED if isinstance(estimator, FederatedMixtureRegression) else {}


@pytest.mark.filterwarnings("ignore")  # non-convergence in 20 rounds on the checks' small random data
@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected)
def test_scikit_learn_conformance(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS[2:3], ids=["FederatedMixtureRegression"])
def test_the_regressions_expected_failures_fail_only_for_want_of_y(estimator):
    """Every expected failure is the missing ``y`` of ``predict_proba(X)`` or ``score_samples(X)``, not a
    wrong answer."""
    failed = {}
    for est, check in estimator_checks_generator(estimator, legacy=True):
        name = (check.func if isinstance(check, partial) else check).__name__
        if name not in REGRESSION_EXPECTED:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(Exception) as raised:
                check(est)
        error, causes = raised.value, []
        while error is not None:   # a check may wrap the TypeError in its own AssertionError
            causes.append(error)
            error = error.__cause__ or error.__context__
        assert any(isinstance(e, TypeError) and "required positional argument: 'y'" in str(e) for e in causes), \
            (name, repr(raised.value))
        failed[name] = True
    assert set(failed) == set(REGRESSION_EXPECTED)
