import numpy as np
import pytest
from hypothesis import given, strategies as st

from fedmm.cli import main
from fedmm.simulate import make_federated_gmm
from fedmm.theory import (TERMS, bound, check_conditions, federation_helps, kappa0, local_rate, rates_a11,
                          theory_C_eta, theory_penalty_params)


def test_terms_by_hand():
    b = bound("gmm", n=100, K=4, d=4, R=2, h=0.1, eps=0.25, T=3, delta=0.5, M=2.0, c_w=0.5, kappa0=0.5)
    S = 4 * 0.75
    assert b.terms["iterative"] == pytest.approx(9 * 0.25 * 2)
    assert b.terms["aggregation"] == pytest.approx(4 * 8 * np.sqrt(4 / (100 * S)) / 0.5)
    assert b.terms["mixing"] == pytest.approx((2 * 2 * np.sqrt(np.log(16) / 100) + 4 * 2 * (4 + np.log(4)) * 0.1) / 0.5)
    local = 4 * 8 * np.sqrt(4 / 100) / 0.5
    assert local_rate(100, 4, 2, 2.0, 0.5) == pytest.approx(local)
    assert b.terms["heterogeneity"] == pytest.approx(0.1)
    assert b.terms["outliers"] == pytest.approx(0.25 * local)
    assert b.dominant == max(b.terms, key=b.terms.get) and b.total == pytest.approx(sum(b.terms.values()))
    assert "dominant" in str(b)


def test_constants_and_errors():
    base = dict(n=100, K=4, d=4, R=2, h=5.0, eps=0.25)
    b = bound("mor", constants={"outliers": 3.0, "heterogeneity": 0.5}, **base)
    ref = bound("mor", **base)
    assert b.terms["outliers"] == pytest.approx(3 * ref.terms["outliers"])
    assert b.terms["heterogeneity"] == pytest.approx(0.5 * local_rate(100, 4, 2))  # capped by C_het * local rate
    with pytest.raises(ValueError, match="Unknown constants"):
        bound("gmm", constants={"aggregaton": 1.0}, **base)
    with pytest.raises(ValueError, match="eps"):
        bound("gmm", n=100, K=4, d=4, R=2, eps=1.0)


def test_rates_and_tuning_by_hand():
    r = rates_a11(n=100, d=4, R=2, xi=0.5, delta=np.exp(-1), S=4, M=1.0, c_w=1.0)
    assert r["W"] == pytest.approx(2 * 0.5 * 0.2 + (2 + 2 * np.log(2)) * 0.1 + np.sqrt(1 / 100))
    assert r["E1"] == pytest.approx(2 * 0.2 + 2 * np.log(2) * 0.1 + 0.1)
    assert r["E2"] == pytest.approx(2 * np.sqrt(4 / 400) + (2 + 2 * np.log(2)) * 0.1 + np.sqrt(1 / 400))
    assert theory_C_eta("gmm", 0.1) == pytest.approx(1 / 1.1) and theory_C_eta("mor", 0.1) == pytest.approx(1 / 1.2)
    assert kappa0("gmm", C_b=0.0, R=2, Delta=10.0) == pytest.approx(2 * 8 * np.exp(-100))
    params = theory_penalty_params("gmm", n=400, K=10, d=10, R=5, Delta=5.0)
    assert set(params) == {"kappa0", "r_w", "r_theta", "W", "E1", "eta_bar"}


def test_theory_penalty_runs_fedgrem():
    from fedmm import FederatedGaussianMixture
    from fedmm.methods import FedGrEM
    X, truth = make_federated_gmm(4, 200, centers=np.array([[0.0, 0.0], [6.0, 0.0]]), random_state=0)
    params = theory_penalty_params("gmm", n=200, K=4, d=2, R=2, Delta=6.0)
    gm = FederatedGaussianMixture(2, method=FedGrEM(penalty="theory", penalty_params=params),
                                  random_state=0).fit(X)
    assert np.all(np.isfinite(gm.means_)) and gm.history_["penalty"][0] > 0


def test_federation_helps_when_tasks_are_many_and_alike():
    assert federation_helps(n=150, K=1000, d=100, R=2, h=0.0, constants={"mixing": 0.01})[0]
    assert not federation_helps(n=150, K=10, d=10, R=5, h=100.0, eps=0.3)[0]


def test_condition_checker_reports_numbers():
    X, truth = make_federated_gmm(10, 150, random_state=0)
    check = check_conditions("gmm", truth.weights, truth.theta, 150, init=(truth.weights, truth.theta + 0.01),
                             eta=1.0 / truth.weights)
    names = [c.name for c in check.conditions]
    assert names == ["i", "ii", "ii", "iii", "iv", "v", "v"]
    assert check.quantities["Delta"] > 0 and "Assumption 3.7 / A.9" in str(check)
    iii = check.conditions[3]
    assert iii.rhs == pytest.approx(np.log(check.quantities["M"] * 5 / check.quantities["c_w"]))
    assert not check.holds  # (iv) needs an astronomically large n with every constant 1
    mor = check_conditions("mor", truth.weights, truth.theta, 150)
    assert "3.10 / A.15" in str(mor)


settings = st.fixed_dictionaries({
    "n": st.integers(10, 10 ** 6), "K": st.integers(2, 1000), "d": st.integers(1, 200), "R": st.integers(2, 10),
    "h": st.floats(0, 10), "eps": st.floats(0, 0.45)})


@given(settings, st.integers(1, 10 ** 6))
def test_every_term_is_non_increasing_in_n(s, extra):
    a, b = bound(**s), bound(**{**s, "n": s["n"] + extra})
    for name in TERMS:
        assert b.terms[name] <= a.terms[name] * (1 + 1e-12)


@given(settings, st.integers(1, 1000))
def test_aggregation_is_non_increasing_in_K(s, extra):
    assert bound(**{**s, "K": s["K"] + extra}).terms["aggregation"] <= bound(**s).terms["aggregation"] * (1 + 1e-12)


@given(settings, st.floats(0, 10))
def test_heterogeneity_is_non_decreasing_in_h_and_capped_by_the_local_rate(s, extra):
    a, b = bound(**s), bound(**{**s, "h": s["h"] + extra})
    assert a.terms["heterogeneity"] <= b.terms["heterogeneity"] <= local_rate(s["n"], s["d"], s["R"]) * (1 + 1e-12)


@given(settings, st.floats(0, 0.5))
def test_outlier_cost_is_non_decreasing_in_eps(s, extra):
    eps = min(s["eps"] + extra, 0.99)
    assert bound(**s).terms["outliers"] <= bound(**{**s, "eps": eps}).terms["outliers"] * (1 + 1e-12)


def test_bounds_command(capsys):
    assert main(["bounds", "--model", "gmm", "--n", "150", "--K", "10", "--d", "10", "--R", "5", "--h", "0.5",
                 "--eps", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "dominant" in out and "federation" in out


def test_theorem_a8_terms_by_hand_at_T_1():
    from fedmm.theory import theorem_a8
    kw = dict(n=400, K=5, d=4, R=2, h=0.2, eps=0.2, T=1, delta=0.3, M=1.0, c_w=1.0, Delta=4.0, C_b=0.1,
              kappa0_tilde=0.5)
    b = theorem_a8("gmm", **kw)
    k, r_w, r_theta, eta_bar = 0.5, 0.1 / 2, 0.4, 2 / 1.1
    W = rates_a11(400, 4, 2, r_theta, 0.3 / 30)["W"]
    E1 = rates_a11(400, 4, 2, r_theta, 0.3 / 30)["E1"]
    E2 = rates_a11(400, 4, 2, r_theta, 0.3 / 6, S=4)["E2"]
    WE = W + 2 * eta_bar * E1
    assert b.terms["iterative"] == pytest.approx(20 * 1 * max(r_w, r_theta))
    assert b.terms["aggregation"] == pytest.approx(eta_bar * E2 / (1 - k / 119))
    assert b.terms["mixing"] == pytest.approx(W / (1 - k / 119))  # r*_{theta,1} = r_theta
    assert b.terms["heterogeneity"] == pytest.approx(18 / (1 - k / 119) * min(0.6, 6 / (1 - k) * WE))
    assert b.terms["outliers"] == pytest.approx(30 / ((1 - k) * (1 - k / 119)) * 0.2 * WE)
    # More rounds shrink the iterative term (here n is too small for the localization to contract:
    # 18 / (1 - k/119) R M sqrt(d/n) = 3.6, so the theorem's mixing term is void beyond T = 1).
    later = theorem_a8("gmm", **{**kw, "T": 50})
    assert later.terms["iterative"] < b.terms["iterative"] and np.isinf(later.terms["mixing"])


def test_theorem_a8_says_nothing_where_localization_cannot_contract():
    from fedmm.theory import theorem_a8
    small = theorem_a8("gmm", n=150, K=10, d=10, R=5, Delta=5.0, T=50)
    assert small.setting["localization_contraction"] > 1 and np.isinf(small.terms["mixing"])
    large = theorem_a8("gmm", n=10 ** 8, K=10, d=10, R=5, Delta=5.0, T=50)
    assert large.setting["localization_contraction"] < 1 and np.isfinite(large.terms["mixing"])


def test_localized_radius_by_hand():
    from fedmm.theory import localized_radius
    r = localized_radius(n=100, K=4, d=4, R=2, h=0.05, eps=0.25, T=2, delta=0.5, M=1.0, c_w=1.0, eta_bar=2.0,
                         kappa0=0.5)
    S, big = 3.0, 2.0
    expected = (4 * 0.5 + 2 * 2 * np.sqrt(4 / 300) + big * (2 + 2 * np.log(2)) * 0.1 + big * np.sqrt(np.log(16) / 100)
                + min(0.05, 2 * 2 * 0.2) + 0.25 * 2 * 2 * big * 0.2)
    assert r == pytest.approx(expected)
