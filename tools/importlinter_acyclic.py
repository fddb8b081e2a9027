"""An import-linter contract type: no import cycle between the modules of a package.

import-linter's own contracts do not say this. ``layers`` and ``independence`` check
chains between the modules they name; ``acyclic_siblings`` compares sibling packages as
wholes (``a.x -> b.y`` and ``b.z -> a.w`` are a cycle there though no module is on one).
This contract looks at modules: it fails when one module reaches itself through the
imports of the package, and names each cycle, shortest first, with the line of every
import on it. It takes no ``ignore_imports``: a cycle is broken in the code, not here.

Configured in pyproject.toml::

    [tool.importlinter]
    contract_types = ["acyclic: tools.importlinter_acyclic.AcyclicContract"]

    [[tool.importlinter.contracts]]
    name = "No import cycles"
    type = "acyclic"
    packages = ["embedlog"]

Every import grimp finds counts: at module level, inside functions, and under
``if TYPE_CHECKING:`` unless the session sets ``exclude_type_checking_imports``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grimp import ImportGraph
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

MAX_CYCLES_SHOWN = 3  # per group of modules that import each other


def strongly_connected(nodes: Iterable[str], edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of two or more modules that each reach the others (Tarjan's algorithm,
    without recursion: a package's import chains can be deeper than Python's stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(edges.get(root, ()))))]
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return sorted(groups)


def shortest_cycle(start: str, group: set[str], edges: Mapping[str, Iterable[str]]) -> list[str]:
    """The shortest cycle from ``start`` back to it inside ``group`` (breadth first):
    ``[start, ..., start]``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges.get(node, ())):
            if nxt not in group:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise ValueError(f"{start} is on no cycle of {sorted(group)}")


def cycles_of(group: Sequence[str], edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """A shortest cycle through each module of the group, each cycle once, shortest first."""
    members = set(group)
    seen: set[tuple[str, ...]] = set()
    found = []
    for module in group:
        cycle = shortest_cycle(module, members, edges)
        # The same cycle found from another of its modules: rotate to its smallest one.
        ring = cycle[:-1]
        at = ring.index(min(ring))
        key = tuple(ring[at:] + ring[:at])
        if key not in seen:
            seen.add(key)
            found.append([*key, key[0]])
    return sorted(found, key=lambda c: (len(c), c))


class AcyclicContract(Contract):
    """No module of ``packages`` reaches itself through imports."""

    type_name = "acyclic"

    packages = fields.ListField(subfield=fields.StringField())
    # Modules (a package: with its descendants) left out while a cycle among them is being
    # broken: named in a warning at every run, never silently.
    exclude = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        groups: list[dict[str, Any]] = []
        left_out: set[str] = set()
        for name in self.exclude or ():  # type: ignore[attr-defined]
            if name not in graph.modules:
                raise ValueError(f"acyclic contract {self.name!r}: no module {name!r} to exclude")
            left_out |= {name} | graph.find_descendants(name)
        for package in self.packages:  # type: ignore[attr-defined]
            if package not in graph.modules:
                raise ValueError(f"acyclic contract {self.name!r}: no package {package!r}")
            modules = ({package} | graph.find_descendants(package)) - left_out
            edges = {
                m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules}
                for m in modules
            }
            for group in strongly_connected(modules, edges):
                cycles = [
                    [_link(graph, a, b) for a, b in itertools.pairwise(cycle)]
                    for cycle in cycles_of(group, edges)
                ]
                groups.append({"modules": group, "cycles": cycles})
        warnings = [
            f"{name} is left out of this contract: its import cycles are not checked"
            for name in sorted(self.exclude or ())  # type: ignore[attr-defined]
        ]
        return ContractCheck(kept=not groups, warnings=warnings, metadata={"groups": groups})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for group in check.metadata["groups"]:
            modules = group["modules"]
            output.print_error(
                f"Import cycle: {len(modules)} modules import each other: {', '.join(modules)}"
            )
            output.new_line()
            cycles = group["cycles"]
            for links in cycles[:MAX_CYCLES_SHOWN]:
                first = links[0]["importer"]
                output.print_error(
                    " -> ".join([first, *(link["imported"] for link in links)]), bold=False
                )
                for link in links:
                    output.indent_cursor()
                    output.print_error(
                        f"{link['importer']} -> {link['imported']} ({link['where']})", bold=False
                    )
                output.new_line()
            if len(cycles) > MAX_CYCLES_SHOWN:
                output.print_error(f"(and {len(cycles) - MAX_CYCLES_SHOWN} more cycles)")
                output.new_line()


def _link(graph: ImportGraph, importer: str, imported: str) -> dict[str, str]:
    details = graph.get_import_details(importer=importer, imported=imported)
    where = ", ".join(f"l.{d['line_number']}: {d['line_contents']}" for d in details)
    return {"importer": importer, "imported": imported, "where": where or "import"}
