"""Reports of which conditions of an assumption hold, with both sides of every inequality."""

from typing import NamedTuple


class Condition(NamedTuple):
    """One inequality of an assumption, with its two sides evaluated."""

    name: str
    formula: str
    lhs: float
    rhs: float
    holds: bool


class AssumptionCheck(NamedTuple):
    """The conditions of one assumption and the quantities they use.

    Attributes
    ----------
    name : str
    conditions : list of Condition
    quantities : dict
        The quantities the conditions use (for App. C's: ``Delta``, ``h``,
        ``e0``, ``eps``, ``K0``; for App. A's: ``c_w``, ``M``, ``Delta``, ...).
    """

    name: str
    conditions: list
    quantities: dict

    @property
    def holds(self):
        return all(c.holds for c in self.conditions)

    def __str__(self):
        q = ", ".join(f"{k} = {v:.4g}" for k, v in self.quantities.items())
        lines = [f"Assumption {self.name}: {'holds' if self.holds else 'fails'}  ({q})"]
        for c in self.conditions:
            lines.append(f"  ({c.name}) {c.formula}: {c.lhs:.4g} vs {c.rhs:.4g}  "
                         f"{'holds' if c.holds else 'FAILS'}")
        return "\n".join(lines)
