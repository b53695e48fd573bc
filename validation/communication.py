"""What a fit sends (issue 45, item 4): ``communication_`` per method, on the paper's GMM design and with many clients.

The paper's GMM design (``make_federated_gmm``: d = 10, R = 5, n = 150 per client, h = 0, diagonal covariances)
with K = 10 and K = 1,000 clients; each client-server method with its defaults (every start is made from messages:
FedGrEM's trimmed pooled start and aligned local EM, FedEM's one client's start, the pooled methods' clustered
clients' starts), and FedGrEM from the paper's start (aligned local EM) beside them. Per fit:
the rounds, the queries, and the bytes down and up: in all, per client, and per client and round. Prints a
markdown table (``docs/decentralized.md``, "Communication").

    python validation/communication.py [--quick]
"""

import argparse
import sys
import warnings

import numpy as np

from fedmm import FederatedGaussianMixture
from fedmm.simulate import make_federated_gmm

METHODS = {"FedGrEM": dict(method="fedgrem"), "FedGrEM, paper's start": dict(method="fedgrem", init="local-em"),
           "FedEM": dict(method="fedem"), "pooled EM": dict(method="pooled-em"),
           "pooled gradient EM": dict(method="pooled-grem")}


def account(K, method, seed=0):
    """One fit's communication: a dict of the table's numbers."""
    X, _ = make_federated_gmm(K, 150, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = FederatedGaussianMixture(5, random_state=seed, **METHODS[method]).fit(X)
    c = est.communication_
    steps = (c["query"] == "step") & (c["method"] == est.method_.name)   # the method's own rounds
    per_round = (c["bytes_down"][steps] + c["bytes_up"][steps]) / c["messages_down"][steps]
    return {"K": K, "method": method, "rounds": int(steps.sum()), "queries in all": len(c["query"]),
            "MB down": c["bytes_down"].sum() / 1e6, "MB up": c["bytes_up"].sum() / 1e6,
            "kB per client": (c["client_bytes_down"] + c["client_bytes_up"]).mean() / 1e3,
            "bytes per client and round (down + up)": int(np.median(per_round)),
            "outside the method's rounds (kB per client)": (c["client_bytes_down"] + c["client_bytes_up"]).mean() / 1e3
            - (c["bytes_down"][steps] + c["bytes_up"][steps]).sum() / K / 1e3}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="K = 10 and 100")
    args = parser.parse_args(argv)
    rows = [account(K, m) for K in ((10, 100) if args.quick else (10, 1000)) for m in METHODS]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
