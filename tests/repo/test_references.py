"""Every module, symbol and file the prose names exists.

A module renamed or moved leaves its old name in docstrings, comments and docs,
where nothing runs it; this reads them as a reader would follow them:

- a backticked dotted name whose first part is one of the package's folders or
  top-level modules (``settings.checks.Invalid``, ``aicr_runner.net.retry``) and
  whose second part is a module of that folder or a name of that module must
  import and resolve attribute by attribute (a settings path such as
  ``settings.provenance.mode`` names no module and is not a code reference, nor is
  a key of chart/values.yaml such as ``aicr.provenance.mode``);
- a path ending in ``.py`` must exist: from the repository root, the package,
  ``src``, or the naming file's folder; a bare file name somewhere in the tree.

Read: the package's docstrings and comments, docs/, the READMEs, the chart's
templates, pyproject.toml and tools/versions.env.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "aicr_runner"
SKIPPED_DIRS = {".venv", ".tools", ".git", "node_modules", "out"}

DOTTED = re.compile(r"`{1,2}((?:aicr_runner\.)?[a-z_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`{1,2}")
FILE_SUFFIXES = frozenset({"py", "md", "json", "yaml", "yml", "txt", "gz", "tgz", "sh", "toml", "tpl"})
PY_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b")


def _units() -> dict[str, Path]:
    """First parts a code reference starts with: each folder and top-level module."""
    units = {}
    for path in PACKAGE.iterdir():
        if path.suffix == ".py" and path.stem != "__init__":
            units[path.stem] = path
        elif path.is_dir() and (path / "__init__.py").is_file():
            units[path.name] = path
    return units


def _python_prose() -> Iterator[tuple[Path, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield path, doc
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield path, token.string


def _other_prose() -> Iterator[tuple[Path, str]]:
    files = [
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "README.md",
        ROOT / "e2e" / "README.md",
        ROOT / "chart" / "README.md",
        *sorted((ROOT / "chart" / "templates").glob("*")),
        ROOT / "pyproject.toml",
        ROOT / "tools" / "versions.env",
    ]
    for path in files:
        if path.is_file():
            yield path, path.read_text()


def _is_code_reference(parts: list[str], units: dict[str, Path]) -> bool:
    unit = units.get(parts[0])
    if unit is None:
        return False
    if unit.is_dir():
        return (unit / f"{parts[1]}.py").is_file() or (unit / parts[1]).is_dir()
    return True  # a top-level module: the second part must be one of its names


def _resolves(parts: list[str]) -> bool:
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module("aicr_runner." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def _chart_values() -> set[str]:
    """Every dotted key of chart/values.yaml (``aicr.provenance.mode``): a chart value,
    not the module ``aicr_runner.aicr.provenance``."""
    found: set[str] = set()
    stack: list[tuple[str, object]] = [("", yaml.safe_load((ROOT / "chart" / "values.yaml").read_text()))]
    while stack:
        prefix, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                found.add(prefix + str(key))
                stack.append((f"{prefix}{key}.", value))
    return found


def dangling_code_references(prose: list[tuple[Path, str]]) -> list[str]:
    units = _units()
    chart_values = _chart_values()
    dangling = set()
    for path, text in prose:
        for match in DOTTED.finditer(text):
            if match.group(1) in chart_values:
                continue
            parts = match.group(1).removeprefix("aicr_runner.").split(".")
            if parts[-1] in FILE_SUFFIXES:
                continue  # a file name (`text.py`), checked as a path
            explicit = match.group(1).startswith("aicr_runner.")
            if (explicit or _is_code_reference(parts, units)) and not _resolves(parts):
                dangling.add(f"{path.relative_to(ROOT)}: {match.group(1)}")
    return sorted(dangling)


def _tree_file_names() -> set[str]:
    names = set()
    for path in ROOT.rglob("*.py"):
        if not SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
            names.add(path.name)
    return names


def dangling_paths(prose: list[tuple[Path, str]]) -> list[str]:
    names = _tree_file_names()
    dangling = set()
    for path, text in prose:
        for match in PY_PATH.finditer(text):
            named = match.group(1)
            if "/" not in named:
                found = named in names
            else:
                found = any((base / named).exists() for base in (ROOT, PACKAGE, ROOT / "src", path.parent))
            if not found:
                dangling.add(f"{path.relative_to(ROOT)}: {named}")
    return sorted(dangling)


def test_every_module_and_symbol_the_prose_names_resolves() -> None:
    assert dangling_code_references([*_python_prose(), *_other_prose()]) == []


def test_every_python_file_the_prose_names_exists() -> None:
    assert dangling_paths([*_python_prose(), *_other_prose()]) == []


HERE = PACKAGE / "settings" / "model.py"


@pytest.mark.parametrize(
    ("text", "dangling"),
    [
        ("the checks of ``settings.checks.Invalid``", False),
        ("a settings path ``settings.provenance.mode``", False),  # no such module: not a code reference
        ("raises ``settings.checks.NoSuchError``", True),
        ("see ``aicr_runner.config_load``", True),
        ("through ``net.retry.BudgetedRetry``", False),
        ("through ``net.retry.BudgetedRetries``", True),
        ("the helpers in `text.py`", False),  # a file name, not a symbol
    ],
)
def test_a_renamed_module_or_symbol_is_found(text: str, dangling: bool) -> None:
    assert bool(dangling_code_references([(HERE, text)])) is dangling


@pytest.mark.parametrize(
    ("text", "dangling"),
    [
        ("checked by tests/repo/test_references.py", False),
        ("checked by tests/unit/test_gitops_examples.py", True),  # moved to tests/repo/
        ("the model (model.py) beside it", False),
        ("the model (config_model.py)", True),
        ("(steps/table.py)", False),  # from the package
    ],
)
def test_a_moved_file_is_found(text: str, dangling: bool) -> None:
    assert bool(dangling_paths([(HERE, text)])) is dangling
