"""docs/ARCHITECTURE.md's module map is the package, and the imports keep its layers.

The map lists every module of src/aicr_runner, and nothing else; the imports
(those that run, at module level or inside functions, not the type-checking
ones) form no cycle, the machine knows no step, and only the entry points
import what sits above them.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "aicr_runner"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def mapped_modules(text: str) -> list[str]:
    """The modules the map's table names, in its order (second column of each row)."""
    section = text.split("## Runtime modules (src/aicr_runner)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| [^|`]+ \| `([A-Za-z_][A-Za-z0-9_]*)` \|", section, flags=re.MULTILINE)


def package_modules() -> set[str]:
    return {path.stem for path in PACKAGE.glob("*.py")}


def imports_of(path: Path) -> set[str]:
    """The package's modules ``path`` imports when it runs (``TYPE_CHECKING`` blocks left out)."""
    modules = package_modules()
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                self.generic_visit(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            parts = (node.module or "").split(".")
            if parts[0] != "aicr_runner":
                return
            names = parts[1:2] or [alias.name for alias in node.names]
            found.update(name for name in names if name in modules)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "aicr_runner" and parts[1:2] and parts[1] in modules:
                    found.add(parts[1])

    Visitor().visit(ast.parse(path.read_text()))
    found.discard(path.stem)
    return found


def import_graph() -> dict[str, set[str]]:
    return {path.stem: imports_of(path) for path in PACKAGE.glob("*.py")}


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return [*path[path.index(imported) :], imported]
            if imported not in state and (found := visit(imported)):
                return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_module_map_names_every_module_once_and_no_other() -> None:
    mapped = mapped_modules(ARCHITECTURE.read_text())
    assert sorted(set(mapped)) == sorted(mapped), "a module is in the map twice"
    assert sorted(package_modules() - set(mapped)) == [], "modules missing from docs/ARCHITECTURE.md's map"
    assert sorted(set(mapped) - package_modules()) == [], "the map names modules that do not exist"


def test_the_map_reader_sees_a_missing_and_a_stale_row() -> None:
    text = ARCHITECTURE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| ") and "| `recovery` |" in line)
    assert "recovery" not in mapped_modules(text.replace(row + "\n", ""))
    stale = text.replace(row, row.replace("`recovery`", "`no_such_module`"))
    assert "no_such_module" in mapped_modules(stale)


def test_the_imports_form_no_cycle() -> None:
    assert cycle_in(import_graph()) is None


def test_the_cycle_finder_finds_one() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_the_machine_knows_no_step_and_only_the_entry_points_import_what_is_above_them() -> None:
    graph = import_graph()
    assert graph["machine"] <= {"report"}
    assert sorted(m for m, imported in graph.items() if "steps" in imported) == ["cli"]
    assert sorted(m for m, imported in graph.items() if "cli" in imported) == ["__main__"]


@pytest.mark.parametrize(
    ("body", "over"),
    [
        # 40 lines from def to the end: at the limit.
        ("def f():\n" + "    x = 1\n" * 39, False),
        ("def f():\n" + "    x = 1\n" * 40, True),
        # A docstring's lines do not count.
        ('def f():\n    """Doc\n\n    more.\n    """\n' + "    x = 1\n" * 39, False),
        # A nested function counts towards the one that holds it.
        ("def f():\n    def g():\n" + "        x = 1\n" * 39, True),
    ],
)
def test_the_function_length_check_counts_as_its_docstring_says(tmp_path: Path, body: str, over: bool) -> None:
    source = tmp_path / "module.py"
    source.write_text(body)
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py"), str(source)]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == (1 if over else 0), result.stderr
    if over:
        assert "module.py:1 f: 41 lines, over the limit of 40" in result.stderr


@pytest.mark.parametrize(("lines", "over"), [(450, False), (451, True)])
def test_the_module_size_check_holds_steps_to_450_lines(tmp_path: Path, lines: int, over: bool) -> None:
    package = tmp_path / "src" / "aicr_runner"
    package.mkdir(parents=True)
    (package / "steps.py").write_text("x = 1\n" * lines)
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py"), "--root", str(tmp_path)]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == (1 if over else 0), result.stderr
    if over:
        assert "src/aicr_runner/steps.py: 451 lines, over its module limit of 450" in result.stderr


def test_no_function_in_the_package_is_over_the_limit() -> None:
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py")]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
