"""The end-to-end harness (e2e/harness) can be lifted into another project: it
imports nothing but itself, the standard library and third-party distributions,
never this project's tests, e2e helpers or runtime (e2e/harness/README.md says
how another project starts it)."""

from __future__ import annotations

import ast
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "e2e" / "harness"
#: Top-level names this checkout provides: importing one ties the harness to it.
PROJECT = {"aicr_runner", "tests", "e2e", "scripts"}


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])


def imported(path: Path, package: str) -> set[str]:
    """Every absolute module ``path`` imports (at any depth: lazy imports count too);
    a relative import is spelled out from ``package``, the one ``path`` is in."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.add(node.module)
    return names


def outside(path: Path, package: str) -> list[str]:
    """What ``path`` imports that is neither the harness, the standard library nor an
    installed third-party distribution."""
    distributions = metadata.packages_distributions()
    wrong = []
    for name in sorted(imported(path, package)):
        top = name.split(".")[0]
        if name == "e2e.harness" or name.startswith("e2e.harness."):
            continue
        if top in PROJECT or not (top in sys.stdlib_module_names or top in distributions):
            wrong.append(name)
    return wrong


def graph() -> dict[str, set[str]]:
    return {
        str(path.relative_to(ROOT)): {
            name for name in imported(path, package_of(path)) if name.split(".")[0] in PROJECT
        }
        for path in sorted(HARNESS.rglob("*.py"))
    }


def test_the_harness_imports_only_itself_the_standard_library_and_third_party_packages() -> None:
    found = {str(path.relative_to(ROOT)): outside(path, package_of(path)) for path in sorted(HARNESS.rglob("*.py"))}
    assert len(found) >= 15, "the harness's modules"
    assert {module: names for module, names in found.items() if names} == {}
    # What it does import of its own: at least the tool locator, from every module that runs a binary.
    assert all("e2e.harness.tools" in graph()[module] for module in ("e2e/harness/apiserver.py", "e2e/harness/helm.py"))


def test_the_check_sees_an_import_of_the_projects_tests_e2e_helpers_or_runtime(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import json\nimport yaml\nfrom e2e.harness.procs import wait_for\nfrom . import model\n\n\n"
        "def f() -> None:\n    from tests.fake_aicr import PACKAGE_DIR\n    from e2e.tools import tool\n"
        "    import aicr_runner.cli\n    import no_such_distribution\n"
    )
    node = "e2e.harness.node"
    assert outside(planted, node) == ["aicr_runner.cli", "e2e.tools", "no_such_distribution", "tests.fake_aicr"]
    assert {"json", "yaml", "e2e.harness.procs", node} <= imported(planted, node)


def test_the_harness_finds_its_tools_in_the_folder_it_is_given_then_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from e2e.harness import tools

    folder = tmp_path / "bin"
    folder.mkdir()
    etcd = folder / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    (folder / "kubelet").write_text("not executable")
    on_path = tmp_path / "path"
    on_path.mkdir()
    for name in ("etcd", "kubelet"):
        (on_path / name).write_text("#!/bin/sh\n")
        (on_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    saved = list(tools._chosen)
    try:
        tools._chosen.clear()
        monkeypatch.setenv(tools.ASSETS_ENV, str(folder))
        assert tools.tool("etcd") == etcd, "KUBEBUILDER_ASSETS without a call"
        monkeypatch.delenv(tools.ASSETS_ENV)
        with pytest.raises(tools.ToolMissing, match=r"etcd: no folder of tools: call .*use_tools"):
            tools.tool("etcd")
        tools.use_tools(folder)
        assert tools.tool("etcd") == etcd
        assert tools.tool("kubelet") == on_path / "kubelet", "not executable in the folder: PATH's"
        with pytest.raises(tools.ToolMissing, match=f"helm: not an executable in {folder}, nor on PATH"):
            tools.tool("helm")
        tools.use_tools(lambda name: Path("/located") / name)
        assert tools.tool("oras") == Path("/located/oras")
    finally:
        tools._chosen[:] = saved
