#!/usr/bin/env python3
"""Fails when a function or method in the runtime (src/aicr_runner) is over 40 lines.

The rule, exactly: a function's length is the number of source lines from its
``def`` line to its last line, decorators not counted, minus the lines of its
docstring. Blank lines and comments inside the body count (they are read as
part of the function). A nested function counts towards the function that
holds it and is checked on its own too. There are no exceptions: a long table
belongs in a module-level constant, not in a function body.

ruff has no rule that measures this (PLR0915 counts statements, not lines).

Every module has a size limit too: ``MODULE_LIMIT`` lines of the whole file (600),
so a module stays one concern a reader can hold; a few have a lower one
(``MODULE_LIMITS``): ``steps/table.py`` holds one short method per state, and what
is not a step belongs elsewhere. They are checked when no paths are given (the
whole package).

Usage: check-function-length.py [--limit N] [--top N] [--root DIR] [paths...]
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
#: The most lines any module in the package may have.
MODULE_LIMIT = 600
#: Modules with a lower limit: path under the repository root -> most lines allowed.
MODULE_LIMITS = {Path("src/aicr_runner/steps/table.py"): 450}
PACKAGE = Path("src/aicr_runner")

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


def oversized(root: Path, limits: dict[Path, int]) -> list[str]:
    """A failure message for each module of the package over its size limit."""
    problems = []
    modules = sorted(path.relative_to(root) for path in (root / PACKAGE).rglob("*.py"))
    for relative in modules:
        limit = limits.get(relative, MODULE_LIMIT)
        lines = len((root / relative).read_text().splitlines())
        if lines > limit:
            problems.append(
                f"{relative}: {lines} lines, over its module limit of {limit}: "
                "split it by concern, or move what is not its concern to the module it belongs in"
            )
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--top", type=int, default=0, help="list the N longest functions")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository checked when no paths are given")
    parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: the runtime package)")
    args = parser.parse_args(argv)
    # The module size limits hold for the package as a whole: checked when it is.
    too_big = [] if args.paths else oversized(args.root, MODULE_LIMITS)
    paths = args.paths or [args.root / "src" / "aicr_runner"]
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    found = [(n, f"{_shown(f)}:{line} {name}") for f in files for n, name, line in functions(f)]
    found.sort(key=lambda item: (-item[0], item[1]))
    for n, where in found[: args.top]:
        print(f"{n:4d}  {where}")
    over = [(n, where) for n, where in found if n > args.limit]
    for n, where in over:
        print(f"{where}: {n} lines, over the limit of {args.limit} (split it)", file=sys.stderr)
    for problem in too_big:
        print(problem, file=sys.stderr)
    return 1 if over or too_big else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
