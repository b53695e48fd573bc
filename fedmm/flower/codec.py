"""fedmm's typed messages as Flower records and back (:mod:`fedmm.protocol` <-> ``RecordDict``).

A message's arrays travel in one ``ArrayRecord`` under their field names (``"theta"``,
``"stats.Sx"``: nested tuples by dotted path, None fields left out), everything else in one
``ConfigRecord``. An array travels as its raw little-endian bytes with its dtype and shape
(:data:`STYPE`), not in Flower's default ``.npy`` form: ``np.save`` and ``np.load`` per array were
two thirds of a simulated fit's time (70 us each, every client, every round), and the bytes are the
same numbers to the last bit. Decoding builds nothing the receiver did not ask for: the receiver
names the type, and :mod:`fedmm.flower.server` checks every array before it is used.
"""

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from ..clients import LocalFit
from ..families import MixtureParams
from ..protocol import stack

__all__ = ["STYPE", "TOGETHER", "encode", "arrays", "record_arrays", "config", "flatten", "unflatten", "prefixed",
           "split_runs", "per_run", "payload", "all_bytes", "local_fit_arrays", "local_fit"]

#: How fedmm's arrays are serialized in a Flower ``Array``: C-ordered little-endian bytes.
STYPE = "fedmm.raw"
#: The queries that may go in one message together (``query.together``, :meth:`fedmm.flower.runs.RunQueries.together`).
TOGETHER = ("start", "step", "loglik", "local", "fit_weights", "family_start")


def flatten(tree, prefix=""):
    """``{dotted field path: ndarray}`` of a NamedTuple tree (None fields left out)."""
    out = {}
    for name, value in zip(tree._fields, tree):
        if value is None:
            continue
        if isinstance(value, tuple):
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = np.asarray(value)
    return out


def unflatten(cls, values, prefix="", nested=None):
    """The NamedTuple ``cls`` from ``values`` (dotted paths); ``nested`` maps a field to its own type."""
    nested = nested or {}
    fields = {}
    for name in cls._fields:
        if name in nested:
            inner = nested[name]
            present = inner is not None and any(k.startswith(f"{prefix}{name}.") for k in values)
            fields[name] = unflatten(inner, values, f"{prefix}{name}.") if present else None
        else:
            fields[name] = values.get(f"{prefix}{name}")
    return cls(**fields)


def prefixed(parts):
    """One message of several runs' arrays (runs side by side, :func:`fedmm.engine.drive`): ``[(slot, arrays)]``
    with each key under ``run<slot>.``."""
    return {f"run{slot}.{key}": value for slot, arrays in parts for key, value in arrays.items()}


def split_runs(values):
    """A message of several runs' arrays (:func:`prefixed`) by slot; keys under no run's prefix under None."""
    out = {}
    for key, value in values.items():
        head, _, rest = key.partition(".")
        slot = int(head[3:]) if head.startswith("run") and head[3:].isdigit() and rest else None
        out.setdefault(slot, {})[key if slot is None else rest] = value
    return out


def per_run(fn, values):
    """``fn`` applied to each run's arrays of a message of runs side by side (:func:`prefixed`), or to the whole
    message when it has none: what a party that alters its replies (:mod:`fedmm.flower.attacks`) alters."""
    parts = split_runs(values)
    if set(parts) == {None}:
        return fn(values)
    return {**parts.get(None, {}), **prefixed([(slot, fn(part)) for slot, part in parts.items() if slot is not None])}


def encode(arrays=None, **config):
    """A ``RecordDict`` with ``arrays`` ({name: ndarray}) and the scalars ``config``."""
    content = RecordDict()
    content["arrays"] = ArrayRecord({k: _to_array(v) for k, v in (arrays or {}).items()})
    content["config"] = ConfigRecord(config)
    return content


def arrays(content):
    """``{name: ndarray}`` of a ``RecordDict`` made by :func:`encode` (KeyError when it has none)."""
    return record_arrays(content["arrays"])


def record_arrays(record):
    """``{name: ndarray}`` of an ``ArrayRecord`` made by :func:`encode`."""
    return {k: _from_array(v) for k, v in record.items()}


def _to_array(value):
    value = np.asarray(value)
    value = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
    return Array(dtype=value.dtype.str, shape=tuple(int(s) for s in value.shape), stype=STYPE, data=value.tobytes())


def _from_array(array):
    """The ndarray of an ``Array`` (a writable copy); ValueError or TypeError for anything but numbers of a
    known dtype whose bytes fill the shape, or another serialization."""
    if array.stype != STYPE:
        raise ValueError(f"an array serialized as {array.stype!r}, expected {STYPE!r}")
    dtype = np.dtype(array.dtype)
    if dtype.kind not in "biuf":
        raise ValueError(f"an array of dtype {dtype}: numbers only")
    return np.frombuffer(array.data, dtype=dtype).reshape(array.shape).astype(dtype.newbyteorder("="))


def config(content):
    """The scalars of a ``RecordDict`` made by :func:`encode`."""
    return dict(content["config"])


def payload(content):
    """The bytes of a fedmm message's arrays as they travel (0 for a record without arrays)."""
    try:
        return sum(len(array.data) for array in content["arrays"].values())
    except Exception:  # anything a client could put in a record
        return 0


def all_bytes(content):
    """The bytes of every array and every bytes value (alone or in a list) of a message's records: what Flower's
    SecAgg+ stages carry (masked vectors and keys travel as bytes in config records)."""
    total = sum(len(array.data) for record in content.array_records.values() for array in record.values())
    for record in content.config_records.values():
        for value in record.values():
            values = value if isinstance(value, list) else [value]
            total += sum(len(v) for v in values if isinstance(v, bytes))
    return total


def local_fit_arrays(fit):
    """One client's :class:`~fedmm.clients.LocalFit` (the query ``local``) as its reply's arrays: its parameters,
    its rounds' count, whether they converged, its log-likelihood, and its own rounds' two traces."""
    return {**flatten(fit.params), "n_iter": fit.n_iter.astype(float), "converged": fit.converged.astype(float),
            "loglik": fit.loglik, "trace": fit.trace[0], "moved": fit.moved[0]}


def local_fit(parts):
    """The clients' replies to one run of the query ``local`` (:func:`local_fit_arrays`), in client order, as one
    :class:`~fedmm.clients.LocalFit`: each client's traces held at its last values once it stopped."""
    T = max(len(part["trace"]) for part in parts)
    pad = lambda x, value: np.pad(x, (0, T - len(x)), constant_values=value)  # noqa: E731
    return LocalFit(stack([unflatten(MixtureParams, part) for part in parts]),
                    np.array([int(part["n_iter"][0]) for part in parts]),
                    np.array([bool(part["converged"][0]) for part in parts]),
                    np.concatenate([part["loglik"] for part in parts]),
                    np.array([pad(part["trace"], part["trace"][-1]) for part in parts]),
                    np.array([pad(part["moved"], 0.0) for part in parts]))
