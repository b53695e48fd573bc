"""Declared constraints on constructor arguments, checked before any work (in the spirit of scikit-learn's
``_parameter_constraints``).

A constraint is a predicate with a description; :func:`validate` checks a dict
of values against a dict of constraints and names the first parameter that
fails, with what it must be.
"""

from numbers import Integral, Real
from typing import Callable, NamedTuple

import numpy as np

__all__ = ["Constraint", "integer", "real", "one_of", "boolean", "none", "function", "instance", "any_of",
           "random_state", "validate"]


class Constraint(NamedTuple):
    accepts: Callable
    description: str


def _is_number(value, kind):
    return isinstance(value, kind) and not isinstance(value, (bool, np.bool_))


def integer(low, high=None):
    """An integer ``>= low`` (and ``<= high``)."""
    text = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
    return Constraint(lambda v: _is_number(v, Integral) and v >= low and (high is None or v <= high), text)


def real(low, high=np.inf, *, low_open=False, high_open=False):
    """A real number in the interval (NaN never; ``inf`` only when ``high`` is ``inf`` and closed)."""
    text = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def accepts(v):
        return (_is_number(v, Real) and not np.isnan(v) and (v > low if low_open else v >= low)
                and (v < high if high_open else v <= high))
    return Constraint(accepts, text)


def one_of(*options):
    """One of the given strings."""
    return Constraint(lambda v: isinstance(v, str) and v in options, f"one of {list(options)}")


boolean = Constraint(lambda v: isinstance(v, (bool, np.bool_)), "True or False")
none = Constraint(lambda v: v is None, "None")
function = Constraint(callable, "a callable")


def instance(*types, text):
    return Constraint(lambda v: isinstance(v, types), text)


def any_of(*constraints):
    return Constraint(lambda v: any(c.accepts(v) for c in constraints),
                      " or ".join(c.description for c in constraints))


#: A seed: None, an integer numpy accepts, or a RandomState (every random choice flows from it).
random_state = any_of(none, integer(0, 2 ** 32 - 1), instance(np.random.RandomState, text="a numpy RandomState"))


def validate(values, constraints):
    """Raise ``ValueError`` naming the first of ``values`` its constraint refuses."""
    for name, constraint in constraints.items():
        value = values[name]
        if not constraint.accepts(value):
            raise ValueError(f"{name} must be {constraint.description}; got {value!r}.")
