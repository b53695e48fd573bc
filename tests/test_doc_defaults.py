"""Every default the docs state in an options table is the code's (issue 42: the docs gave defaults the
code no longer had). A row's first cell names the option in backticks (``FedGrEM's `init` `` for a
method's own default start); its second cell's first value is the default (one per option where the
row names several)."""

import inspect
import re
from pathlib import Path

import pytest

from fedmm import FederatedGaussianMixture, FederatedMixtureRegression
from fedmm.methods import FedGrEM, SparseFedGrEM

DOCS = Path(__file__).resolve().parents[1] / "docs"
HOLDERS = (FederatedGaussianMixture, FederatedMixtureRegression, FedGrEM, SparseFedGrEM)   # what the tables describe
ROW = re.compile(r"^\| ([^|]*`\w+`[^|]*) \| ([^|]+) \|", re.M)


def stated_defaults():
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for table in re.findall(r"^\| (?:option|parameter) \| default \|.*?(?=\n\n|\Z)", text, flags=re.M | re.S):
            for cell, default in ROW.findall(table):
                names = re.findall(r"`(\w+)`", cell)
                values = re.findall(r"`([^`]+)`", default) or re.findall(r"[\w.+-]+", default)
                pairs = zip(names, values) if len(names) == len(values) else [(names[0], values[0])]
                for name, value in pairs:      # "`max_iter`, `tol` | `500`, `1e-3`": one default each
                    yield page.name, cell, name, value


def _defaults(name, method_specific):
    """The code's defaults of ``name``: a method's own (its ``default_<name>``) or a constructor's."""
    if method_specific:
        return {repr(getattr(FedGrEM, f"default_{name}", None)),
                repr(inspect.signature(FedGrEM).parameters[name].default) if name in
                inspect.signature(FedGrEM).parameters else None}
    return {repr(inspect.signature(c).parameters[name].default) for c in HOLDERS
            if name in inspect.signature(c).parameters}


CASES = list(stated_defaults())


def test_the_docs_state_defaults():
    assert len(CASES) >= 10


@pytest.mark.parametrize("page, cell, name, stated", CASES, ids=[f"{c[0]}:{c[2]}" for c in CASES])
def test_a_stated_default_is_the_codes(page, cell, name, stated):
    code = _defaults(name, "FedGrEM's" in cell) - {None}
    assert code, f"{page}: no class takes {name!r}"
    as_python = {stated, repr(stated), f"'{stated.strip(chr(34))}'"}
    assert code & as_python, f"{page} says {name}={stated}, the code {code}"
