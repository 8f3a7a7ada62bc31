"""The Python SDK's shape: its modules import one another as a tree, never in a cycle,
and the public names stay importable from ``keelwave`` and ``keelwave.sdk``.

A cycle is what made the SDK hard to change (the run called back into the
client that made it); these tests keep it from coming back. The graph is
grimp's (import-linter's), TYPE_CHECKING imports and imports inside functions
included: a cycle hidden from the interpreter is still a cycle for the reader.
"""

from __future__ import annotations

import grimp
import pytest

import keelwave
import keelwave.sdk

SDK = "keelwave.sdk"
PUBLIC = {
    "AgentStopped",
    "Keelwave",
    "LoopDetected",
    "MaxStepsExceeded",
    "Redaction",
    "Run",
    "RunScope",
    "canonical_json",
    "fingerprint",
    "get_current_run",
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("keelwave", cache_dir=None)


def sdk_modules(graph: grimp.ImportGraph) -> set[str]:
    return {SDK} | graph.find_descendants(SDK)


def imports_among(graph: grimp.ImportGraph, modules: set[str]) -> dict[str, set[str]]:
    """Who imports whom, restricted to ``modules``."""
    return {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle in the import graph ``edges`` (its modules, the first repeated last), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module) :] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(edges[module]):
            cycle = visit(imported)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(edges):
        cycle = visit(module)
        if cycle is not None:
            return cycle
    return None


def test_the_sdk_modules_import_each_other_without_a_cycle(graph: grimp.ImportGraph) -> None:
    modules = sdk_modules(graph)
    assert {f"{SDK}._client", f"{SDK}._run", f"{SDK}._context"} <= modules
    # With the package above it and the protocol module below: no way round through them.
    edges = imports_among(graph, modules | {"keelwave", "keelwave.protocol"})
    assert find_cycle(edges) is None


def test_the_cycle_check_finds_the_old_cycle(graph: grimp.ImportGraph) -> None:
    # The run calling back into the client, as it did before the send function.
    edges = imports_among(graph, sdk_modules(graph))
    edges[f"{SDK}._run"].add(f"{SDK}._client")
    cycle = find_cycle(edges)
    assert cycle is not None and {f"{SDK}._run", f"{SDK}._client"} <= set(cycle)


def test_neither_the_run_nor_the_adapters_reach_the_client(graph: grimp.ImportGraph) -> None:
    # They are given a send function instead; the client is the top of the tree.
    client = f"{SDK}._client"
    for module in sdk_modules(graph) - {SDK, client}:
        assert not graph.chain_exists(importer=module, imported=client), module


def test_the_context_depends_on_nothing_but_the_run_type(graph: grimp.ImportGraph) -> None:
    imported = graph.find_modules_directly_imported_by(f"{SDK}._context")
    assert {m for m in imported if m.startswith("keelwave")} == {f"{SDK}._run"}


def test_the_sdk_takes_its_vocabulary_from_the_protocol_module(
    graph: grimp.ImportGraph,
) -> None:
    assert graph.direct_import_exists(importer=f"{SDK}._run", imported="keelwave.protocol")
    assert graph.direct_import_exists(importer=f"{SDK}._validate", imported="keelwave.protocol")


def test_the_checks_and_the_delivery_sit_low_in_the_tree(graph: grimp.ImportGraph) -> None:
    # What every other module uses: they import nothing of the SDK above them.
    imported = graph.find_modules_directly_imported_by(f"{SDK}._validate")
    assert {m for m in imported if m.startswith("keelwave")} == {"keelwave.protocol"}
    imported = graph.find_modules_directly_imported_by(f"{SDK}._delivery")
    assert {m for m in imported if m.startswith("keelwave")} == {f"{SDK}._validate"}


def test_public_names_are_reexported() -> None:
    assert set(keelwave.sdk.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(keelwave.sdk, name) is not None
    top_level = PUBLIC - {"RunScope", "canonical_json", "fingerprint"}
    assert set(keelwave.__all__) == top_level | {"__version__"}
    for name in keelwave.__all__:
        if name != "__version__":
            assert getattr(keelwave, name) is getattr(keelwave.sdk, name)


def test_the_private_modules_are_private(graph: grimp.ImportGraph) -> None:
    children = {m.rsplit(".", 1)[1] for m in graph.find_children(SDK)}
    assert children == {
        "_adapters", "_canonical", "_client", "_context", "_delivery", "_errors", "_redact",
        "_run", "_spool", "_transport", "_validate",
    }  # fmt: skip
