import numpy as np

from fedmm.simulate import PAPER_CENTERS, make_federated_gmm, make_federated_mor


def test_paper_design_centres_and_heterogeneity():
    X, truth = make_federated_gmm(10, 150, h=0.75, outlier_clients=[9], random_state=0)
    assert truth.centers.shape == (5, 10) and PAPER_CENTERS[1, -1] == -1
    np.testing.assert_allclose(np.linalg.norm(truth.theta - truth.centers, axis=-1), 0.75)
    np.testing.assert_allclose(truth.weights.sum(axis=1), 1.0)
    assert [x.shape for x in X] == [(150, 10)] * 10
    assert truth.outliers.tolist() == [False] * 9 + [True]


def test_gmm_outlier_client_is_n_2_3i():
    X, _ = make_federated_gmm(2, 20000, outlier_clients=[1], random_state=1)
    np.testing.assert_allclose(X[1].mean(axis=0), 2.0, atol=0.05)
    np.testing.assert_allclose(X[1].var(axis=0), 3.0, rtol=0.05)


def test_mor_outlier_client_has_coefficients_three():
    X, y, _ = make_federated_mor(2, 20000, outlier_clients=[0], random_state=2)
    coef = np.linalg.lstsq(X[0], y[0], rcond=None)[0]
    np.testing.assert_allclose(coef, 3.0, atol=0.05)


def test_seeded_and_unequal_sizes():
    a, _ = make_federated_gmm(3, [10, 20, 30], random_state=3)
    b, _ = make_federated_gmm(3, [10, 20, 30], random_state=3)
    assert [len(x) for x in a] == [10, 20, 30]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
