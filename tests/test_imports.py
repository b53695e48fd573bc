"""fedmm's import graph: no cycle, and no module imports one of a higher layer (issue 42).

Layers, from the bottom: helpers that know nothing of mixtures; the data and its units; the compiled
kernels and the families; the protocol's messages and the algorithms' building blocks; the strategies;
the engine and private rounds (privacy); the starts; the registry and the estimators; what is built on
the estimators (studies, model selection, the command line, Flower). Imports inside functions count too.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fedmm"
LAYERS = [
    {"_params", "_assumptions", "threads", "graphs", "simulate", "reductions", "robust"},
    {"data", "units", "theory"},
    {"kernels", "kmeans", "alignment", "families"},
    {"protocol", "metrics"},
    {"algorithms", "clients"},
    {"engine", "privacy"},
    {"initialization"},
    {"methods"},
    {"estimators"},
    {"selection", "model_selection", "studies", "cli", "flower", ""},
]


def _module(path):
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(package, name):
    """``from package import name``: the submodule if ``name`` is one, else the package."""
    candidate = f"{package}.{name}" if package else name
    path = PACKAGE.joinpath(*candidate.split("."))
    return candidate if path.with_suffix(".py").exists() or (path / "__init__.py").exists() else package


def imports():
    """``{module: {imported fedmm modules}}``, module names relative to ``fedmm`` ("" is the package)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here.split(".") if here else []
                base = base[:len(base) - node.level + 1]
                package = ".".join(base + ([node.module] if node.module else []))
                edges.update(_target(package, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedmm"):
                package = node.module[len("fedmm."):] if node.module != "fedmm" else ""
                edges.update(_target(package, alias.name) for alias in node.names)
        edges.discard(module)
    return graph


def _layer(module):
    top = module.split(".")[0]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


def test_every_module_has_a_layer():
    for module in imports():
        _layer(module)


def test_no_module_imports_one_of_a_higher_layer():
    wrong = [(m, t) for m, targets in imports().items() for t in targets
             if _layer(t) > _layer(m) and t.split(".")[0] != m.split(".")[0]]
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    graph = imports()
    state = {}

    def visit(module, path):
        if state.get(module) == "done":
            return
        if state.get(module) == "open":
            pytest.fail("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        state[module] = "done"

    for module in sorted(graph):
        visit(module, [])
