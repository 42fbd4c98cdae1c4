#!/usr/bin/env python3
"""Fails when a function or method in the runtime (src/aicr_runner) is over 40 lines.

The rule, exactly: a function's length is the number of source lines from its
``def`` line to its last line, decorators not counted, minus the lines of its
docstring. Blank lines and comments inside the body count (they are read as
part of the function). A nested function counts towards the function that
holds it and is checked on its own too. There are no exceptions: a long table
belongs in a module-level constant, not in a function body.

ruff has no rule that measures this (PLR0915 counts statements, not lines).

Usage: check-function-length.py [--limit N] [--top N] [paths...]
``--top N`` lists the N longest functions (for reports), whatever the limit.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 40

Function = ast.FunctionDef | ast.AsyncFunctionDef


def length(node: Function) -> int:
    """Lines from ``def`` to the end of the body, minus the docstring's lines."""
    end = node.end_lineno or node.lineno
    lines = end - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def functions(path: Path) -> Iterator[tuple[int, str, int]]:
    """(length, qualified name, line) of every function in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield length(child), name, child.lineno
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _shown(path: Path) -> Path:
    return path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--top", type=int, default=0, help="list the N longest functions")
    parser.add_argument("paths", nargs="*", type=Path, default=[ROOT / "src" / "aicr_runner"])
    args = parser.parse_args(argv)
    files = sorted(f for p in args.paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    found = [(n, f"{_shown(f)}:{line} {name}") for f in files for n, name, line in functions(f)]
    found.sort(key=lambda item: (-item[0], item[1]))
    for n, where in found[: args.top]:
        print(f"{n:4d}  {where}")
    over = [(n, where) for n, where in found if n > args.limit]
    for n, where in over:
        print(f"{where}: {n} lines, over the limit of {args.limit} (split it)", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
