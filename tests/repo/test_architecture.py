"""The package's folders are its layers, and docs/ARCHITECTURE.md maps the tree.

Every module of src/aicr_runner sits in a folder (a layer) or is one of the few
top-level modules (the entry point, the exception tree, the logs). The layers are
floors: a module imports only from a floor below its own (or from its own
folder), never up and never sideways. The imports that run (at module level or
inside functions; ``TYPE_CHECKING`` blocks left out) are read from the source.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "aicr_runner"
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"

#: The floors, lowest first. A unit is a folder or a top-level module; units on
#: one floor do not import each other. ``__init__`` is the package's version.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "errors", "masking", "text"}),
    frozenset({"run"}),
    frozenset({"net"}),
    frozenset({"settings"}),
    frozenset({"logs"}),
    frozenset({"children", "kube", "pack"}),
    frozenset({"aicr"}),
    frozenset({"helm"}),
    frozenset({"mirror"}),
    frozenset({"steps"}),
    frozenset({"fleet"}),
    frozenset({"outcome"}),
    frozenset({"wiring"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)


def module_name(path: Path, package: Path) -> str:
    """``aicr/release.py`` -> ``aicr.release``; the package's own ``__init__.py`` -> ``__init__``."""
    parts = path.relative_to(package).with_suffix("").parts
    return "__init__" if parts == ("__init__",) else ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by dotted name (a folder's empty ``__init__`` left out)."""
    found = {module_name(path, package): path for path in package.rglob("*.py")}
    return {name: path for name, path in found.items() if not name.endswith(".__init__")}


def unit_of(module: str) -> str:
    return module.split(".", 1)[0]


def floor_of(unit: str) -> int:
    return next(index for index, floor in enumerate(FLOORS) if unit in floor)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports when it runs (``TYPE_CHECKING`` blocks left out)."""
    found: set[str] = set()

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                self.generic_visit(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            parts = (node.module or "").split(".")
            if parts[0] != "aicr_runner":
                return
            base = ".".join(parts[1:])
            for alias in node.names:
                target = resolve(f"{base}.{alias.name}" if base else alias.name) or resolve(base)
                found.add(target or "__init__")

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "aicr_runner" and (target := resolve(".".join(parts[1:]))):
                    found.add(target)

    Visitor().visit(ast.parse(path.read_text()))
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    found = modules(package)
    known = set(found)
    return {name: imports_of(path, known) - {name} for name, path in found.items()}


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up a floor or sideways to another unit of the same floor."""
    problems = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            here, there = unit_of(module), unit_of(target)
            if here != there and floor_of(there) >= floor_of(here):
                problems.append(f"{module} imports {target}")
    return problems


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph.get(module, set())):
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


def mapped_modules(text: str) -> list[str]:
    """The modules the map's table names, in its order (second column of each row)."""
    section = text.split("## Runtime modules (src/aicr_runner)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| [^|`]+ \| `([A-Za-z_][A-Za-z0-9_.]*)` \|", section, flags=re.MULTILINE)


def test_every_unit_of_the_tree_is_on_one_floor_and_there_are_at_least_five_folders() -> None:
    units = {unit_of(name) for name in modules()}
    placed = set().union(*FLOORS)
    assert sorted(units - placed) == [], "a folder or top-level module is on no floor of FLOORS"
    assert sorted(placed - units) == [], "FLOORS names a unit the package does not have"
    assert sum(len(floor) for floor in FLOORS) == len(placed), "a unit is on two floors"
    folders = sorted(path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file())
    assert len(folders) >= 5, folders


def test_every_folder_init_is_empty_so_version_imports_nothing_it_does_not_need() -> None:
    inits = sorted(PACKAGE.glob("*/__init__.py"))
    assert inits, "no layer folder found"
    assert [str(init.relative_to(PACKAGE)) for init in inits if init.read_text().strip()] == []


def test_imports_only_go_down_the_floors() -> None:
    graph = import_graph()
    assert graph, "the package's import graph is empty"
    assert wrong_way_imports(graph) == []


def test_the_floor_check_fails_on_a_planted_upward_import(tmp_path: Path) -> None:
    planted = tmp_path / "aicr_runner"
    shutil.copytree(PACKAGE, planted, ignore=shutil.ignore_patterns("__pycache__"))
    deadline = planted / "net" / "deadline.py"
    deadline.write_text(deadline.read_text() + "\nfrom aicr_runner.steps import table  # planted\n")
    sideways = planted / "kube" / "sink.py"
    sideways.write_text(sideways.read_text() + "\nimport aicr_runner.pack.pull  # planted\n")
    graph = import_graph(planted)
    assert wrong_way_imports(graph) == ["kube.sink imports pack.pull", "net.deadline imports steps.table"]


def test_the_imports_form_no_cycle() -> None:
    assert cycle_in(import_graph()) is None


def test_the_cycle_finder_finds_one() -> None:
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


def test_the_machine_knows_no_step_and_only_the_entry_points_import_what_is_above_them() -> None:
    graph = import_graph()
    assert graph["run.machine"] <= {"run.report", "run.invocation"}
    assert sorted(m for m, imported in graph.items() if "steps.table" in imported) == ["wiring"]
    assert sorted(m for m, imported in graph.items() if "wiring" in imported) == ["cli"]
    assert sorted(m for m, imported in graph.items() if "cli" in imported) == ["__main__"]


def test_the_module_map_names_every_module_once_and_no_other() -> None:
    mapped = mapped_modules(ARCHITECTURE.read_text())
    assert mapped, "docs/ARCHITECTURE.md's module map is empty"
    assert sorted(set(mapped)) == sorted(mapped), "a module is in the map twice"
    assert sorted(set(modules()) - set(mapped)) == [], "modules missing from docs/ARCHITECTURE.md's map"
    assert sorted(set(mapped) - set(modules())) == [], "the map names modules that do not exist"


def test_the_map_reader_sees_a_missing_and_a_stale_row() -> None:
    text = ARCHITECTURE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| ") and "| `helm.pending` |" in line)
    assert "helm.pending" not in mapped_modules(text.replace(row + "\n", ""))
    stale = text.replace(row, row.replace("`helm.pending`", "`helm.no_such_module`"))
    assert "helm.no_such_module" in mapped_modules(stale)


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
def test_the_module_size_check_holds_the_step_table_to_450_lines(tmp_path: Path, lines: int, over: bool) -> None:
    package = tmp_path / "src" / "aicr_runner" / "steps"
    package.mkdir(parents=True)
    (package / "table.py").write_text("x = 1\n" * lines)
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py"), "--root", str(tmp_path)]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == (1 if over else 0), result.stderr
    if over:
        assert "src/aicr_runner/steps/table.py: 451 lines, over its module limit of 450" in result.stderr


@pytest.mark.parametrize(("lines", "over"), [(600, False), (601, True)])
def test_the_module_size_check_holds_every_module_to_600_lines(tmp_path: Path, lines: int, over: bool) -> None:
    package = tmp_path / "src" / "aicr_runner" / "pack"
    package.mkdir(parents=True)
    (package / "planted.py").write_text("x = 1\n" * lines)
    (package / "small.py").write_text("x = 1\n")
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py"), "--root", str(tmp_path)]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == (1 if over else 0), result.stderr
    if over:
        assert result.stderr.strip() == (
            "src/aicr_runner/pack/planted.py: 601 lines, over its module limit of 600: "
            "split it by concern, or move what is not its concern to the module it belongs in"
        )


def test_no_function_in_the_package_is_over_the_limit() -> None:
    check = [sys.executable, str(ROOT / "scripts" / "check-function-length.py")]
    result = subprocess.run(check, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def private_imports(package: Path = PACKAGE) -> list[str]:
    """``module: from other import _name``: a module reaching into another's private names."""
    found = []
    for name, path in modules(package).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aicr_runner"):
                hidden = [
                    alias.name for alias in node.names if alias.name.startswith("_") and alias.name != "__version__"
                ]
                found += [f"{name}: from {node.module} import {item}" for item in hidden]
    return found


def test_no_module_imports_another_modules_private_names(tmp_path: Path) -> None:
    assert private_imports() == []
    planted = tmp_path / "aicr_runner" / "settings"
    planted.mkdir(parents=True)
    (planted / "x.py").write_text("from aicr_runner.settings.checks import Invalid, _text\n")
    assert private_imports(tmp_path / "aicr_runner") == ["settings.x: from aicr_runner.settings.checks import _text"]
