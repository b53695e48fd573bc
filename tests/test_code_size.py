"""fedmm's code stays readable in pieces (issue 62): no module over 600 lines, no function over 60 lines of code.

A function's code lines are the lines of its body that hold code: not its docstring, comments or blank lines.
A nested function counts within the function that holds it.
"""

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fedmm"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def _code_lines(source):
    """The numbers of the lines of ``source`` that hold a token other than a comment, a string or a line break."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def _docstring_lines(tree):
    """The line numbers of every module, class and function docstring in ``tree``."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def long_functions(path, limit=MAX_FUNCTION_LINES):
    """``(name, code lines)`` of each function in the file at ``path`` whose body holds over ``limit`` code lines."""
    source = path.read_text()
    tree = ast.parse(source)
    code = _code_lines(source) - _docstring_lines(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = set(range(node.body[0].lineno, node.end_lineno + 1))
            if len(body & code) > limit:
                found.append((node.name, len(body & code)))
    return found


def test_no_module_over_600_lines():
    over = {str(path.relative_to(PACKAGE)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_over_60_code_lines():
    over = {f"{path.relative_to(PACKAGE)}:{name}": n for path in PACKAGE.rglob("*.py")
            for name, n in long_functions(path)}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines of code: {over}"
