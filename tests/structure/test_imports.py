"""The packages' structure, checked from their source: no import circle among the modules of any
package (function-level and TYPE_CHECKING imports included: hiding a circle inside a function does not
remove it), no module imports the library through its face (`propme_metrics/__init__`: the arrows would
run back up), the application (`propme`) is imported by neither the library nor the plugin,
statistics never import the report layer, and no module imports another module's private (`_name`)
attribute."""
from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

import propme
import propme_metrics
import propme_tasks

ROOTS = [Path(p.__file__).parent for p in (propme, propme_metrics, propme_tasks)]
PACKAGES = ("propme", "propme_metrics", "propme_tasks")


def circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Every import circle among the modules directly inside `package`, each once (as a list of
    modules, the first repeated at the end): depth-first search over the direct imports."""
    inside = {m for m in graph.find_children(package)} | {package}
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in inside}
    found, seen = [], set()

    def visit(path: list[str]) -> None:
        for nxt in edges[path[-1]]:
            if nxt == path[0]:
                key = frozenset(path)
                if key not in seen:
                    seen.add(key)
                    found.append(path + [nxt])
            elif nxt not in path and nxt > path[0]:  # each circle from its smallest module only
                visit(path + [nxt])

    for start in sorted(inside):
        visit([start])
    return found


def private_imports(root: Path, packages: tuple[str, ...]) -> list[str]:
    """`from <one of packages>... import _name` anywhere under `root` (dunder names such as
    `__version__` are public): 'file:line: module._name' each."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level == 0 and not module.startswith(packages):
                continue  # another library's names are its own business
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno}: {'.' * node.level}{module}.{name}")
    return out


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


def _packages(graph: grimp.ImportGraph) -> list[str]:
    return sorted(m for m in graph.modules if graph.find_children(m))


def test_no_import_circle_inside_any_package(graph):
    packages = _packages(graph)
    assert {"propme.demo", "propme.cli", "propme_metrics.report", "propme_metrics.metrics"} <= set(packages)
    assert {p: circles(graph, p) for p in packages if circles(graph, p)} == {}


def test_no_module_imports_the_library_through_its_face(graph):
    """Internal code imports names from the modules that define them; `propme_metrics/__init__` is the
    face for users only (its own lazy loader and `propme_metrics.version` aside)."""
    importers = sorted(graph.find_modules_that_directly_import("propme_metrics") - {"propme_metrics"})
    assert importers == []


def test_the_application_is_above_the_library_and_the_plugin(graph):
    for package in ("propme_metrics", "propme_tasks"):
        assert graph.find_shortest_chain(importer=package, imported="propme") is None
        for module in graph.find_descendants(package):
            chain = graph.find_shortest_chain(importer=module, imported="propme")
            assert chain is None, chain


def test_the_circle_finder_finds_a_circle(tmp_path, monkeypatch):
    """The check above can fail: a package of three modules importing in a ring (one of them inside a
    function, as the report hid its circles) is one circle."""
    pkg = tmp_path / "ringpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from ringpkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from ringpkg import c\n")
    (pkg / "c.py").write_text("import ringpkg.a\n")
    (pkg / "d.py").write_text("import ringpkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ring = grimp.build_graph("ringpkg", cache_dir=None)
    assert circles(ring, "ringpkg") == [["ringpkg.a", "ringpkg.b", "ringpkg.c", "ringpkg.a"]]


def test_statistics_never_import_the_report(graph):
    for module in graph.find_children("propme_metrics.metrics"):
        chain = graph.find_shortest_chain(importer=module, imported="propme_metrics.report")
        assert chain is None, chain
        for report_module in graph.find_descendants("propme_metrics.report"):
            assert not graph.direct_import_exists(importer=module, imported=report_module)


def test_no_module_imports_another_modules_private_name():
    found = [line for root in ROOTS for line in private_imports(root, PACKAGES)]
    assert found == []


def test_the_private_import_finder_finds_one(tmp_path):
    pkg = tmp_path / "propme_metrics"
    pkg.mkdir()
    (pkg / "a.py").write_text("from propme_metrics.b import _hidden, public, __version__\n"
                              "from .c import _other\nfrom os import _exit\n")
    assert private_imports(pkg, ("propme_metrics",)) == ["propme_metrics/a.py:1: propme_metrics.b._hidden",
                                                          "propme_metrics/a.py:2: .c._other"]
