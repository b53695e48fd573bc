"""The docs the estimators share: their common parameters and fitted attributes (numpydoc sections)."""

from ..methods import METHODS

_SHARED_PARAMS_DOC = """
    method : str or method object, default="fedgrem"
        The estimation method, by name with its defaults ({METHOD_NAMES}) or as an object of
        :mod:`fedmm.methods` with options of its own, e.g. ``FedGrEM(penalty="paper")``
        (``docs/methods.md`` says which to choose): FedGrEM is robust to outlier clients and pools
        clients as far as they are alike.
    n_init : int, default=1
        Number of starts; the best log-likelihood is kept (per client for the
        local methods, whose clients are independent problems).
    max_iter : int, default=500
        Maximum number of rounds (E-step + M-step on every client). FedGrEM
        needs about 150 on the paper's design and up to several hundred on
        real data with many components; a run that stops early is worse
        than its fixed point (hence more than scikit-learn's 100).
    tol : float, default=1e-3
        Stop when no client's mean log-likelihood per sample changes by this much.
    init : {"auto", "family", "local-em", "common", "trimmed-pooled", "pooled-and-local", "screened"}, \
            default="auto"
        How starts are made (``docs/alignment.md``, ``docs/units.md``), each from what the clients send
        (never their rows, so every start runs across parties): the
        family's start on each client (for methods that share one estimate, the clients' starts
        clustered by the server), local EM on every
        client then alignment (the paper's, App. B), one start broadcast to
        all clients, EM with pooled components and each client's own
        proportions, trimmed of the clients it fits worst, or both of the
        last two (the second kept
        only where the method finds it better), or the family's start on the features of excess pooled
        variance only (many features of which few separate the components; identity or spherical
        covariances). "auto" is the method's default
        ("pooled-and-local" for FedGrEM, "screened" for sparse FedGrEM where the covariances allow it,
        "local-em" for TGMM, "family" for FedEM and the local and pooled
        methods, "common" for D-FedEM). Ignored when
        initial values are given.
    alignment : {"consensus", "stepwise", "greedy", "exhaustive"} or None, default="consensus"
        How per-client labels are aligned (:func:`fedmm.alignment.align`):
        per-client starts of methods that pool estimates, and the final
        estimates of the local methods, so that component ``r`` is the same
        component on every client. None leaves labels as estimated.
    backend : {"auto", "numba", "numpy", "cupy"}, default="auto"
        Kernels for the E-step (``docs/performance.md``): Numba's fused
        parallel pass, the numpy reference, or CuPy on a GPU; "auto" takes
        CuPy for at least 1e6 samples when a GPU is present, Numba otherwise.
    warm_start : bool, default=False
        Start a refit from the last fit's parameters (as scikit-learn's ``GaussianMixture``); ``n_init``
        and the initial values then play no part. The clients and features must be the last fit's.
    verbose : int, default=0
        0 prints nothing; 1 one line per run (start, FedGrEM's restart passes)
        with its rounds, time and log-likelihood per sample; 2 also every 10
        rounds, with the round's records (as in ``history_``). A private fit prints each stage's rounds and
        time, then its rounds and the privacy spent (no log-likelihood: none is released).
    random_state : int, RandomState instance or None, default=None
        Seeds every random choice (the starts).
"""

_SHARED_PARAMS_DOC = _SHARED_PARAMS_DOC.replace("{METHOD_NAMES}", ", ".join(f'"{m}"' for m in METHODS))

_SHARED_ATTRS_DOC = """
    weights_ : ndarray of shape (n_clients, n_components)
        Mixing proportions of every client.
    n_clients_ : int
    client_ids_ : ndarray of shape (n_clients,)
        Client labels: ``0..K-1`` for list input, the sorted ``groups`` values otherwise.
    n_features_in_ : int
    n_iter_ : int
        Rounds used by the kept run(s), summed over their passes: ``max_iter``
        bounds each pass, and FedGrEM's restarts from the consensus
        (``center_restarts``) add passes, so ``n_iter_`` can exceed it.
    converged_ : bool
        Whether the stopping rule (``tol``) was met within ``max_iter`` rounds. A private fit has no stopping
        rule (the log-likelihoods it would read are not released): it runs exactly the rounds its noise was
        calibrated for, and ``converged_`` is False.
    singular_components_ : ndarray of shape (n_clients, n_components), bool
        Components that hold at least half a sample but fewer than their own variance needs (two for a
        diagonal variance, ``d + 1`` for a full covariance, the coefficients and one more for a
        regression): of their client for per-client methods (local EM, local gradient EM), over all
        clients for the others. The fit warns about them (``docs/units.md``).
    empty_components_ : ndarray of shape (n_components,), bool
        Components with less than half a sample over all clients: the fit is a mixture of fewer
        components, and warns (``EmptyComponentWarning``; ``docs/units.md``).
    log_likelihood_ : ndarray of shape (n_clients,)
        Mean log-likelihood per sample of every client at the fitted parameters. Absent after a private fit,
        whose clients do not release their log-likelihoods (``score`` computes them where the data are).
    lower_bound_ : float
        Mean log-likelihood per sample over all clients; absent after a private fit, as ``log_likelihood_``.
    alignment_ : Alignment or None
        The permutations applied to align the clients' labels (``perms``, of
        shape (n_clients, n_components)), their score and method; None when
        none were applied.
    history_ : dict of ndarray of shape (n_iter_,)
        Round by round, for the start with the highest total log-likelihood:
        ``"log_likelihood"`` (mean per sample, at the round's start; not after a private fit),
        ``"parameter_change"``, ``"messages"`` and ``"floats"`` sent in the round
        (``docs/decentralized.md``, "Communication"), and for FedGrEM ``"penalty"`` (``lambda_t``),
        ``"central_iterations"``, ``"pooled_fraction"`` and ``"groups"``.
    communication_ : dict of ndarray
        Everything the fit sent between the server and the clients, every start and restart included
        (:class:`fedmm.protocol.Ledger`): per query, in order, its name (``"query"``: ``"hello"``,
        ``"units"``, ``"family_start"``, ``"start"``, ``"step"`` (a round), ``"loglik"``, ...), the
        messages and bytes down and up (``"messages_down"``, ``"bytes_down"``, ...), and each client's
        totals (``"client_messages_down"``, ``"client_bytes_down"``, ...). Bytes of the numbers as Flower
        carries them; the same in one process as on Flower (``docs/decentralized.md``, "Communication").
    center_ : ndarray of shape (n_components, n_features)
        The consensus: FedGrEM's ``nu_bar`` (its largest group's), the shared estimate of FedEM and
        the pooled methods, FedeRiCo's most used model, the median of the client estimates otherwise.
    centers_ : ndarray of shape (n_groups, n_components, n_features)
        Every group's consensus, the largest first (FedGrEM's ``n_centers``, FedeRiCo's models in use; one
        group otherwise). ``personalize`` fits a new client at each and keeps the best.
    groups_ : ndarray of shape (n_clients,)
        FedGrEM only: each client's group, 0 the largest (``docs/fedgrem.md``, "Groups of clients").
    pooled_, distance_to_center_ : ndarray of shape (n_clients, n_components)
        FedGrEM and d-FedGrEM (per neighbourhood): whether the last central update pooled each client's
        component onto the centre, and how far its local estimate was.
    pooling_threshold_ : ndarray of shape (n_clients, n_components)
        FedGrEM only: ``lambda_T / (sqrt(n_k) max(1, w_kr R))`` at the starting
        weights with ``pooling_sizes="information"`` (the default), ``lambda_T /
        sqrt(n_k)`` with ``"client"``, ``/ sqrt(n_k w_kr R)`` with
        ``"component"``: the pooling distance. With ``shrinkage="linear"``, the
        distance each client's component moved towards the centre.
    outlier_scores_ : ndarray of shape (n_clients,)
        FedGrEM only: how far each client's estimates are from the consensus,
        against the clients' own spread (:func:`fedmm.algorithms.fedgrem.outlier_scores`);
        above 1: significant at level 1% (its means) or 0.1% (its variances,
        :func:`fedmm.algorithms.fedgrem.variance_scores`).
    suspected_outliers_ : ndarray
        FedGrEM only: ids of the clients with score above 1, most suspect first
        (an honest client is flagged about 2% of the time on the paper's design),
        after the clients caught otherwise: in one process a client whose rows
        repeat another's (:class:`fedmm.CopiedClientWarning`), on Flower a party
        whose replies came relabelled.
    restarted_clients_ : ndarray
        FedGrEM only: ids of the clients whose restart from the consensus was
        kept (``center_restarts``).
    own_fit_clients_ : ndarray
        FedGrEM only: ids of the suspected outliers given their own fit (EM on their rows alone, from the
        default start) because their rows reject the federation's estimate: likelihood-ratio tests of all the
        parameters and of the means alone, each at 0.1% (:meth:`fedmm.algorithms.fedgrem.FedGrEM.own_fits`).
    collaborator_weights_ : ndarray of shape (n_clients, n_clients)
        FedeRiCo only: row ``i`` is client ``i``'s weights ``w_ij`` on the
        clients' models after the last round.
    used_models_ : ndarray of shape (n_clients,)
        FedeRiCo only: the client whose model each client reports and predicts
        with: the one it weighs most (its own where it weighs it as much as any), or, where it weighs others
        within a factor ``e`` of that one (no evidence between them), the one of those its group's rows are
        evidence for.
    collaboration_graph_ : ndarray of shape (n_clients, n_clients), bool
        Dynamic graph only: which clients pulled each other in the last round.
    penalty_selection_ : dict or None
        ``penalty="auto"`` only: the options ``"chosen"`` (a dict), the
        ``"candidates"``, their trimmed held-out log-likelihoods ``"score"``
        and every client's ``"client_scores"``
        (:func:`fedmm.algorithms.tuning.select_penalty`).
"""
