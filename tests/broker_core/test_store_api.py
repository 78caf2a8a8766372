"""The store's public methods that replace reaching into its parts (gateway call sites
used ``store.log.scan``, ``store.log.end`` and ``broker_core.cleanup`` with the store),
the parts it exposes (``store.pop``), and the layering of the package itself."""

from __future__ import annotations

import ast
from pathlib import Path

from broker_core import Message, MessageStore, PopConsumer, StoreConfig
from broker_core.commit_log import ScanStop

from .conftest import SMALL

PACKAGE = Path(__file__).resolve().parents[2] / "broker_core"


def test_records_from_yields_the_records_the_log_holds_from_a_position(store):
    first = store.append(Message(topic="a", body=b"1"), ["q"])
    second = store.append(Message(topic="b", body=b"2", properties={"k": b"v"}), ["q", "r"])
    assert store.log_start == 0 and store.log_end == second.end
    assert store.log_bytes == second.end
    assert [r.body for r in store.records_from(0)] == [b"1", b"2"]
    assert [r.position for r in store.records_from(first.end)] == [second.position]
    assert list(store.records_from(second.end)) == []
    # the same records as a scan of the log, which the gateway used before
    scanned = [r for r in store.log.scan(0) if not isinstance(r, ScanStop)]
    assert list(store.records_from(0)) == scanned


def test_records_from_starts_at_the_log_start_after_retention(tmp_path):
    cfg = StoreConfig(segment_bytes=64 * 1024, max_message_bytes=4096, retention_bytes=1)
    with MessageStore.open(tmp_path, cfg) as s:
        for i in range(300):
            s.append(Message(topic="t", body=b"%03d" % i + b"x" * 500), ["q"])
        report = s.apply_retention()
        assert report.segments_removed > 0 and s.log_start == report.log_min_position > 0
        records = list(s.records_from(0))
        assert records[0].position == s.log_start and records[-1].body.startswith(b"299")


def test_next_revive_at_is_the_earliest_invisible_time(store):
    store.append(Message(topic="t", body=b"m"), ["q"])
    assert store.pop.next_revive_at() is None
    popped = store.pop.pop("g", "q", 1, invisible_ms=60_000)
    due = store.pop.next_revive_at()
    assert due is not None and due == PopConsumer.receipt_visible_at(popped[0].receipt)
    store.pop.ack(popped[0].receipt)
    assert store.pop.next_revive_at() is None


def test_housekeeping_methods(tmp_path):
    with MessageStore.open(tmp_path, SMALL) as s:
        s.append(Message(topic="t", body=b"m"), ["old", "kept"])
        later = s.lmq("old").last_write_ms + 10_000
        assert [i.name for i in s.idle_lmqs(5_000, later)] == ["kept", "old"]
        s.add_listener("kept", lambda *_: None)
        assert [i.name for i in s.idle_lmqs(5_000, later)] == ["old"]
        report = s.remove_lmqs(["old", "never"])
        assert report.names == ["old"] and s.lmq("old") is None and s.lmq("kept") is not None
        assert s.verify().ok
        rebuilt = s.rebuild_index()
        assert rebuilt.index_rebuilt and s.lmq("kept").messages == 1


#: NamedTuple's public methods (underscored only so they cannot clash with fields).
_NAMEDTUPLE_API = {"_make", "_replace", "_asdict", "_fields"}


def _imports(path: Path) -> tuple[set[str], list[tuple[str, str]]]:
    """(broker_core modules imported at run time, (object, private name) reach-ins)."""
    tree = ast.parse(path.read_text())
    runtime: set[str] = set()
    for node in tree.body:  # module level only: TYPE_CHECKING blocks are ast.If
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "broker_core":
                runtime |= {a.name for a in node.names}
            elif node.module.startswith("broker_core."):
                runtime.add(node.module.split(".")[1])
    # private names this module defines itself (its classes' methods and attributes):
    # using them on another instance of its own class is not a reach-in
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} | {
        n.attr for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "self"
    }
    reach_ins = [
        (ast.unparse(n.value), n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
        and n.attr not in _NAMEDTUPLE_API
        and n.attr not in own
    ]
    for node in ast.walk(tree):  # no lazy imports inside functions
        if isinstance(node, ast.FunctionDef):
            for inner in ast.walk(node):
                assert not isinstance(inner, ast.Import | ast.ImportFrom), (
                    f"{path.name}: import inside {node.name}()"
                )
    return runtime, reach_ins


def test_the_stores_parts_do_not_import_the_store():
    """Recovery and cleanup work on the store's parts (``StoreParts``); the facade calls
    them, never the other way round, not even for types (no store <-> recovery <->
    cleanup circle)."""
    for name in ("recovery", "cleanup", "pop"):
        text = (PACKAGE / f"{name}.py").read_text()
        assert "broker_core.store" not in text, f"{name}.py imports the store"


def test_no_private_reach_ins_lazy_imports_or_import_cycles():
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        runtime, reach_ins = _imports(path)
        assert reach_ins == [], f"{path.name} uses private names of other objects"
        if path.stem != "__init__":
            graph[path.stem] = runtime

    def visit(name: str, stack: list[str]) -> None:
        assert name not in stack, f"import cycle: {' -> '.join([*stack, name])}"
        for dep in graph.get(name, ()):
            visit(dep, [*stack, name])

    for name in graph:
        visit(name, [])
