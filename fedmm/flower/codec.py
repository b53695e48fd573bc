"""fedmm's typed messages as Flower records and back (:mod:`fedmm.protocol` <-> ``RecordDict``).

A message's arrays travel in one ``ArrayRecord`` under their field names (``"theta"``,
``"stats.Sx"``: nested tuples by dotted path, None fields left out), everything else in one
``ConfigRecord``. Decoding builds nothing the receiver did not ask for: the receiver names the type,
and :mod:`fedmm.flower.server` checks every array before it is used.
"""

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

__all__ = ["encode", "arrays", "config", "flatten", "unflatten"]


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


def encode(arrays=None, **config):
    """A ``RecordDict`` with ``arrays`` ({name: ndarray}) and the scalars ``config``."""
    content = RecordDict()
    content["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in (arrays or {}).items()})
    content["config"] = ConfigRecord(config)
    return content


def arrays(content):
    """``{name: ndarray}`` of a ``RecordDict`` made by :func:`encode` (KeyError when it has none)."""
    return {k: v.numpy() for k, v in content["arrays"].items()}


def config(content):
    """The scalars of a ``RecordDict`` made by :func:`encode`."""
    return dict(content["config"])
