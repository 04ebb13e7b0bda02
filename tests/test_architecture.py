"""The shape of the package: who may import whom, read from the source with ``ast``.

Every ``import`` and ``from ... import`` counts, at any depth (inside functions too:
an import deferred to call time still ties two modules together). Edges are the
modules named, not their parent packages: ``from guidedbp.x import y`` is an edge to
``guidedbp.x.y`` when ``y`` is a submodule, else to ``guidedbp.x``. So a package
``__init__`` that re-exports its submodules is an edge like any other, and a submodule
that imports a sibling directly makes no cycle with its package. A package's lazy table
(``_LAZY = {"Name": "guidedbp.room.module"}``, as guidedbp/__init__.py and
guidedbp/engine/__init__.py have) is strings, not imports: it makes no edge, but
:func:`lazy_tables` reads it, and its modules obey the rooms' rules too.

The rooms are those of shared/STYLE.md, top to bottom (:data:`ROOMS`, :data:`MAY_IMPORT`):

    cli                                 the clients: plot, checks, keras callback,
                                        pytest plugin, demo (beside the CLI)
    the package's front (guidedbp/__init__.py: lazy names)
    pipeline
    api (the engine's explainer plus model specs; guidedbp.targets)
    figures (matplotlib figures and figure files: the pipeline's and plot's)
    models, engine, render, io          each imports none of the others

and the shared modules every room may import (errors, caveats, curve maths, text and
file helpers). An import may go down, never up or sideways (one exception: the pytest
plugin runs the checks); no module imports a private name (``_x``, a module or an
attribute) of another room; no two modules import each other.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Rooms the engine must not import, directly or through another module.
NOT_FOR_ENGINE = ("guidedbp.models", "guidedbp.io", "guidedbp.render", "guidedbp.cli",
                  "guidedbp.checks", "guidedbp.pipeline", "guidedbp.demo", "guidedbp.figures",
                  "guidedbp.plot", "guidedbp.api", "guidedbp.keras", "guidedbp.pytest_plugin")
#: Top-level packages that pull TensorFlow in.
TENSORFLOW = ("tensorflow", "keras", "tf_keras")

#: Room -> the modules it holds (a package, or one module). The front is the package's
#: own ``__init__`` only; a module in no room here fails :func:`test_every_module_has_a_room`.
ROOMS = {
    "cli": ("guidedbp.cli", "guidedbp.__main__"),
    "plot": ("guidedbp.plot",),
    "checks": ("guidedbp.checks",),
    "keras": ("guidedbp.keras",),
    "pytest_plugin": ("guidedbp.pytest_plugin",),
    "demo": ("guidedbp.demo",),
    "front": ("guidedbp",),
    "pipeline": ("guidedbp.pipeline",),
    "api": ("guidedbp.api", "guidedbp.targets"),
    "figures": ("guidedbp.figures",),
    "models": ("guidedbp.models",),
    "engine": ("guidedbp.engine",),
    "render": ("guidedbp.render",),
    "io": ("guidedbp.io",),
    # Pure Python (numpy at most) and importing only each other: every room may use
    # them. Their underscore names (_text, _files) are private to the package, not to
    # a room.
    "shared": ("guidedbp.errors", "guidedbp.caveats", "guidedbp.curves", "guidedbp._text",
               "guidedbp._outputs", "guidedbp._files", "guidedbp._json", "guidedbp._extras",
               "guidedbp._numbers"),
}
_BELOW_THE_CLIENTS = frozenset({"front", "pipeline", "api", "figures", "models", "engine",
                                "render", "io"})
#: Room -> the other rooms it may import (every room may import "shared").
MAY_IMPORT = {
    "cli": frozenset(ROOMS) - {"cli"},
    "plot": _BELOW_THE_CLIENTS,
    "checks": _BELOW_THE_CLIENTS,
    "keras": _BELOW_THE_CLIENTS,
    "pytest_plugin": _BELOW_THE_CLIENTS | {"checks"},  # the checks' pytest front end
    "demo": _BELOW_THE_CLIENTS,
    "front": _BELOW_THE_CLIENTS - {"front"},
    "pipeline": frozenset({"api", "figures", "models", "engine", "render", "io"}),
    "api": frozenset({"models", "engine", "io"}),  # io: a reference image's file
    "figures": frozenset({"engine", "render", "io"}),  # engine.methods: signed or not
    "models": frozenset(),
    "engine": frozenset(),
    "render": frozenset(),
    "io": frozenset(),
    "shared": frozenset(),
}


#: The engine's sub-rooms (issue 40), top to bottom: each imports only the ones below it.
#: The face coordinates (the explainer, the model as it traces it, the caveats it finds;
#: the package's lazy names);
#: the passes run the traced graph for each kind of method; the methods are records and
#: their maths; the targets are what a user names and how a pass scores it; the graph is
#: the traced ops (activations, layers, precision); the rules are the gradient rules'
#: records and math; the base is what all of them read (options, input checks, results).
#: A name ending in "." holds every module below it; the others name one module.
ENGINE_ROOMS = {
    "face": ("guidedbp.engine", "guidedbp.engine.explainer", "guidedbp.engine.traced_model",
             "guidedbp.engine.found_caveats", "guidedbp.engine.payoff",
             "guidedbp.engine.reference"),
    "passes": ("guidedbp.engine.passes", "guidedbp.engine.passes."),
    "methods": ("guidedbp.engine.methods", "guidedbp.engine.methods."),
    "targets": ("guidedbp.engine.targets", "guidedbp.engine.targets."),
    "graph": ("guidedbp.engine.graph", "guidedbp.engine.graph."),
    "rules": ("guidedbp.engine.rules", "guidedbp.engine.rules."),
    "base": ("guidedbp.engine.options", "guidedbp.engine.inputs", "guidedbp.engine.warn",
             "guidedbp.engine.explanation"),
}


def engine_room(module: str) -> str | None:
    """The engine sub-room holding ``module``, or None."""
    for room, holds in ENGINE_ROOMS.items():
        if any(module == held or (held.endswith(".") and module.startswith(held))
               for held in holds):
            return room
    return None


@dataclass(frozen=True)
class Import:
    """One module or name imported: ``from target import name`` (``name`` None for an
    import of the module itself), at ``line``."""

    target: str
    name: str | None
    line: int


@dataclass(repr=False)
class Graph:
    """Imports among one package's modules.

    Attributes:
        files: Module name -> its source file, relative to the package's parent folder.
        edges: Module -> {imported module of the package: line of the first such import}.
        external: Module -> {top-level name of an outside package: line of the first import}.
        imports: Module -> every import of a module of the package, one
            :class:`Import` per module or name imported, in line order.
    """

    files: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, int]] = field(default_factory=dict)
    external: dict[str, dict[str, int]] = field(default_factory=dict)
    imports: dict[str, list[Import]] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<Graph of {len(self.files)} modules>"

    def where(self, source: str, target: str) -> str:
        """``file:line`` of the first import of ``target`` (a module or an outside
        package) in ``source``."""
        line = self.edges[source].get(target) or self.external[source].get(target)
        return f"{self.files[source].as_posix()}:{line}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def build_graph(root: Path) -> Graph:
    """The import graph of the package in folder ``root`` (its name is the folder's)."""
    graph = Graph()
    for path in sorted(root.rglob("*.py")):
        graph.files[module_name(path, root)] = path.relative_to(root.parent)
    package = root.name
    for name, path in graph.files.items():
        graph.edges[name], graph.external[name], graph.imports[name] = {}, {}, []
        own_package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        source = (root.parent / path).read_text()
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
                names = [None] * len(targets)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = own_package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                # A name that is a submodule is an import of that module, else of ``base``.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in graph.files
                           else base for alias in node.names]
                names = [None if target != base else alias.name
                         for target, alias in zip(targets, node.names)]
            else:
                continue
            for target, imported in zip(targets, names):
                if target == package or target.startswith(package + "."):
                    target = _nearest_module(target, graph.files)
                    graph.imports[name].append(Import(target, imported, node.lineno))
                    if target != name:
                        _note(graph.edges[name], target, node.lineno)
                else:
                    _note(graph.external[name], target.split(".")[0], node.lineno)
    for records in graph.imports.values():
        records.sort(key=lambda record: record.line)
    return graph


def _note(lines: dict[str, int], target: str, line: int) -> None:
    # ast.walk goes breadth first, not in line order: keep the earliest line.
    lines[target] = min(line, lines.get(target, line))


def _nearest_module(dotted: str, modules) -> str:
    """``dotted`` itself, or its longest prefix that is a module (``import a.b.c as x``)."""
    while dotted not in modules and "." in dotted:
        dotted = dotted.rpartition(".")[0]
    return dotted


def import_groups(graph: Graph) -> list[list[str]]:
    """The groups of two or more modules that import each other, directly or round a
    loop (Tarjan's strongly connected components), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph.edges):
        if node not in index:
            visit(node)
    return groups


def cycles(graph: Graph) -> list[list[str]]:
    """One shortest loop (its first module repeated at the end) per :func:`import_groups`."""
    return [shortest_path(graph, group[0], lambda module, start=group[0]: module == start,
                          within=set(group), skip_start=True) for group in import_groups(graph)]


def shortest_path(graph: Graph, start: str, is_goal, within=None,
                  skip_start: bool = False) -> list[str] | None:
    """The shortest import chain from ``start`` to a module for which ``is_goal`` holds."""
    parents: dict[str, str | None] = {start: None}
    queue = deque([start])
    if not skip_start and is_goal(start):
        return [start]
    while queue:
        node = queue.popleft()
        for target in sorted(graph.edges[node]):
            if within is not None and target not in within:
                continue
            if is_goal(target):
                path = [target, node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return path[::-1]
            if target not in parents:
                parents[target] = node
                queue.append(target)
    return None


def describe(graph: Graph, path: list[str]) -> str:
    """``a -> b -> c`` with where each import is."""
    steps = [f"{source} -> {target} ({graph.where(source, target)})"
             for source, target in zip(path, path[1:])]
    return " -> ".join(path) + "\n    " + "\n    ".join(steps)


def heavy_imports(graph: Graph, module: str) -> list[str]:
    return [name for name in TENSORFLOW if name in graph.external[module]]


def leaks(graph: Graph, room: str, is_bad) -> list[list[str]]:
    """Every import out of ``room`` (a package) that is, or leads to, a module for which
    ``is_bad`` holds: one chain per offending import, starting inside the room."""
    inside = [name for name in graph.edges if under(name, [room])]
    assert inside, f"no {room} modules found"
    found = []
    for name in inside:
        if is_bad(name):
            found.append([name])
        for target in sorted(graph.edges[name]):
            if under(target, [room]):
                continue  # reported from that module itself
            path = shortest_path(graph, target, is_bad)
            if path:
                found.append([name, *path])
    return found


def under(module: str, packages) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def room_of(module: str, rooms=None) -> str | None:
    """The room holding ``module`` (the longest match), or None."""
    best, length = None, -1
    for room, holds in (rooms or ROOMS).items():
        for held in holds:
            exact_only = "." not in held  # the package itself holds no submodules
            if module == held or (not exact_only and module.startswith(held + ".")):
                if len(held) > length:
                    best, length = room, len(held)
    return best


def is_private(module: str) -> bool:
    """Whether a part of ``module`` below the top package is ``_x`` (not ``__x__``)."""
    return any(part.startswith("_") and not part.startswith("__")
               for part in module.split(".")[1:])


def lazy_tables(graph: Graph, root: Path) -> dict[str, dict[str, tuple[str, int]]]:
    """Module -> its ``_LAZY`` table as ``{"Name": ("module", line)}``, for modules that
    have one."""
    tables = {}
    for name, path in graph.files.items():
        tree = ast.parse((root.parent / path).read_text(), str(path))
        for node in tree.body:
            if (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict)
                    and any(getattr(target, "id", None) == "_LAZY" for target in
                            (node.targets if isinstance(node, ast.Assign) else [node.target]))):
                tables[name] = {key.value: (value.value, key.lineno)
                                for key, value in zip(node.value.keys, node.value.values)}
    return tables


def all_imports(graph: Graph, root: Path):
    """``(source, Import)`` for every import, and one per name of a lazy table."""
    for source, records in graph.imports.items():
        for record in records:
            yield source, record
    for source, table in lazy_tables(graph, root).items():
        for attribute, (module, line) in table.items():
            yield source, Import(module, attribute, line)


def wrong_way(graph: Graph, root: Path, rooms=None, may_import=None) -> list[str]:
    """Each import from one room into a room it may not import, as ``file:line: a -> b``."""
    rooms, may_import = rooms or ROOMS, may_import or MAY_IMPORT
    found = []
    for source, record in all_imports(graph, root):
        here, there = room_of(source, rooms), room_of(record.target, rooms)
        if here != there and there != "shared" and there not in may_import[here]:
            found.append(f"{graph.files[source].as_posix()}:{record.line}: {source} ({here}) "
                         f"-> {record.target} ({there})")
    return list(dict.fromkeys(found))  # once per line, not per name imported


def private_crossings(graph: Graph, root: Path, rooms=None) -> list[str]:
    """Each import of a private module or name (``_x``) of another room."""
    rooms = rooms or ROOMS
    found = []
    for source, record in all_imports(graph, root):
        there = room_of(record.target, rooms)
        if room_of(source, rooms) == there or there == "shared":
            continue
        private_name = record.name is not None and record.name.startswith("_") \
            and not record.name.startswith("__")
        if is_private(record.target) or private_name:
            what = record.target + (f" import {record.name}" if record.name else "")
            found.append(f"{graph.files[source].as_posix()}:{record.line}: {source} imports "
                         f"{what}")
    return found


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build_graph(REPO / "guidedbp")


# -- the package --------------------------------------------------------------------------------


def test_no_import_cycles(graph):
    groups = import_groups(graph)
    assert not groups, "modules that import each other:\n" + "\n".join(
        f"{', '.join(group)}; one loop: {describe(graph, loop)}"
        for group, loop in zip(groups, cycles(graph)))


def test_every_module_has_a_room(graph):
    homeless = [name for name in graph.files if room_of(name) is None]
    assert not homeless, f"modules in no room of ROOMS: {', '.join(homeless)}"


def test_imports_go_down_the_rooms(graph):
    found = wrong_way(graph, REPO / "guidedbp")
    assert not found, ("imports against the room order of shared/STYLE.md (MAY_IMPORT):\n"
                       + "\n".join(found))


def test_no_private_name_crosses_a_room(graph):
    found = private_crossings(graph, REPO / "guidedbp")
    assert not found, ("private names imported from another room: make them public in "
                       "their room, or move them\n" + "\n".join(found))


def test_shared_modules_need_only_python_and_numpy(graph):
    found = [f"{name} imports {outside} ({graph.where(name, outside)})"
             for name in graph.files if room_of(name) == "shared"
             for outside in graph.external[name]
             if outside not in sys.stdlib_module_names and outside not in ("numpy", "__future__")]
    assert not found, "shared modules every room imports must stay light:\n" + "\n".join(found)


def test_engine_imports_no_other_room(graph):
    found = leaks(graph, "guidedbp.engine", lambda module: under(module, NOT_FOR_ENGINE))
    assert not found, "the engine imports other rooms:\n" + "\n".join(
        describe(graph, path) for path in found)


def test_every_engine_module_has_a_sub_room(graph):
    homeless = [name for name in graph.files if under(name, ["guidedbp.engine"])
                and engine_room(name) is None]
    assert not homeless, f"engine modules in no sub-room of ENGINE_ROOMS: {', '.join(homeless)}"


def test_engine_sub_rooms_import_only_the_ones_below(graph):
    order = list(ENGINE_ROOMS)
    found = []
    for source, record in all_imports(graph, REPO / "guidedbp"):
        if not under(source, ["guidedbp.engine"]) or not under(record.target,
                                                                  ["guidedbp.engine"]):
            continue
        here, there = engine_room(source), engine_room(record.target)
        if order.index(there) < order.index(here):
            found.append(f"{graph.files[source].as_posix()}:{record.line}: {source} ({here}) "
                         f"-> {record.target} ({there})")
    assert not found, "imports up the engine's sub-rooms:\n" + "\n".join(dict.fromkeys(found))


def test_no_module_is_over_450_lines(graph):
    long = {name: lines for name, path in graph.files.items()
            if (lines := (REPO / path).read_text().count("\n")) > 450}
    assert not long, f"modules over 450 lines (split them by job): {long}"


@pytest.mark.parametrize("room", ["guidedbp.render", "guidedbp.io", "guidedbp.figures"])
def test_room_does_not_import_tensorflow(graph, room):
    found = leaks(graph, room, lambda module: heavy_imports(graph, module))
    assert not found, f"{room} reaches TensorFlow:\n" + "\n".join(
        (describe(graph, path) if len(path) > 1 else path[0]) + "\n    " + ", ".join(
            f"{path[-1]} imports {heavy} ({graph.where(path[-1], heavy)})"
            for heavy in heavy_imports(graph, path[-1]))
        for path in found)


@pytest.mark.parametrize("module", ["guidedbp", "guidedbp.render", "guidedbp.figures"])
def test_import_does_not_load_tensorflow(module):
    script = (f"import json, sys\nimport {module}\n"
              f"print(json.dumps(sorted(m for m in {TENSORFLOW!r} if m in sys.modules)))")
    process = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout.splitlines()[-1]) == [], f"import {module} loaded them"


# -- the graph builder itself, on packages written here -------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_builder_resolves_every_import_form(tmp_path):
    package = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import os\nimport pkg.b as bee\nfrom . import c\nfrom .sub import thing\n",
        "pkg/b.py": "def f():\n    from pkg.sub.deep import g\n    import numpy.linalg\n",
        "pkg/c.py": "from pkg import CONSTANT\n",
        "pkg/sub/__init__.py": "from .deep import thing\n",
        "pkg/sub/deep.py": "from ..b import f\nfrom .. import c, VALUE\n",
    })
    graph = build_graph(package)
    assert set(graph.files) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub", "pkg.sub.deep"}
    assert set(graph.edges["pkg.a"]) == {"pkg.b", "pkg.c", "pkg.sub"}
    assert graph.external["pkg.a"] == {"os": 1}
    assert set(graph.edges["pkg.b"]) == {"pkg.sub.deep"}  # inside a function
    assert graph.external["pkg.b"] == {"numpy": 3}
    assert set(graph.edges["pkg.c"]) == {"pkg"}
    assert set(graph.edges["pkg.sub"]) == {"pkg.sub.deep"}
    assert set(graph.edges["pkg.sub.deep"]) == {"pkg.b", "pkg.c", "pkg"}
    # pkg.b -> pkg.sub.deep -> pkg.b: imports each other, once inside a function.
    assert cycles(graph) == [["pkg.b", "pkg.sub.deep", "pkg.b"]]


def test_builder_allows_a_package_that_re_exports_its_modules(tmp_path):
    package = write_package(tmp_path, {
        "pkg/__init__.py": "from pkg.maps import render\nfrom pkg.panel import panel\n",
        "pkg/maps.py": "from pkg.panel import panel\nfrom pkg import colours\n",
        "pkg/panel.py": "",
        "pkg/colours.py": "",
        "pkg/cli.py": "from pkg import maps\n",
    })
    graph = build_graph(package)
    assert cycles(graph) == []
    assert set(graph.edges["pkg.maps"]) == {"pkg.panel", "pkg.colours"}


def test_builder_finds_a_module_that_imports_its_own_package(tmp_path):
    package = write_package(tmp_path, {
        "pkg/__init__.py": "from pkg.maps import render\n",
        "pkg/maps.py": "from pkg import DEFAULT\n",
    })
    assert cycles(build_graph(package)) == [["pkg", "pkg.maps", "pkg"]]


def test_leaks_name_each_import_out_of_a_room_and_its_chain(tmp_path):
    package = write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/engine/__init__.py": "",
        "pkg/engine/core.py": "from pkg.engine import util\nfrom pkg import helpers\n",
        "pkg/engine/util.py": "def f():\n    import pkg.io.files\n",
        "pkg/helpers.py": "from pkg.io import files\n",
        "pkg/io/__init__.py": "",
        "pkg/io/files.py": "import tensorflow as tf\n",
    })
    graph = build_graph(package)
    assert leaks(graph, "pkg.engine", lambda module: under(module, ["pkg.io"])) == [
        ["pkg.engine.core", "pkg.helpers", "pkg.io.files"],
        ["pkg.engine.util", "pkg.io.files"],
    ]
    assert leaks(graph, "pkg.io", lambda module: heavy_imports(graph, module)) == [
        ["pkg.io.files"]]
    assert graph.where("pkg.engine.util", "pkg.io.files") == "pkg/engine/util.py:2"


def test_rules_find_wrong_way_and_private_imports(tmp_path):
    package = write_package(tmp_path, {
        "pkg/__init__.py": '_LAZY = {"Report": "pkg.low._graph", "run": "pkg.mid.run"}\n',
        "pkg/shared.py": "",
        "pkg/top/__init__.py": "",
        "pkg/top/client.py": "from pkg.mid import run\nfrom pkg.low import _helper\n",
        "pkg/mid/__init__.py": "",
        "pkg/mid/run.py": ("from pkg import shared\ndef f():\n"
                           "    from pkg.top import client, VALUE\n"),
        "pkg/low/__init__.py": "",
        "pkg/low/_graph.py": "",
        "pkg/low/maps.py": "from pkg.low._graph import Report\nfrom pkg.low import _graph\n",
    })
    rooms = {"front": ("pkg",), "top": ("pkg.top",), "mid": ("pkg.mid",),
             "low": ("pkg.low",), "shared": ("pkg.shared",)}
    may_import = {"front": {"mid", "low"}, "top": {"mid", "low"}, "mid": {"low"},
                  "low": set(), "shared": set()}
    graph = build_graph(package)
    assert room_of("pkg", rooms) == "front" and room_of("pkg.top.client", rooms) == "top"
    assert room_of("pkg.other", rooms) is None
    assert wrong_way(graph, package, rooms, may_import) == [
        "pkg/mid/run.py:3: pkg.mid.run (mid) -> pkg.top.client (top)",
        "pkg/mid/run.py:3: pkg.mid.run (mid) -> pkg.top (top)"]
    assert private_crossings(graph, package, rooms) == [
        "pkg/top/client.py:2: pkg.top.client imports pkg.low import _helper",
        "pkg/__init__.py:1: pkg imports pkg.low._graph import Report",
    ]
