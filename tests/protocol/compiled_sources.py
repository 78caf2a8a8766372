"""The Python source of a compiled module (setup.py's COMPILED), loaded beside the
extension under another name, for the differential tests that run both on the same
input (``tests/protocol/*/test_*_compiled.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was imported from its extension (not ``LMQ_NO_EXTENSIONS=1``,
    not an unbuilt checkout)."""
    return not (module.__file__ or "").endswith(".py")


def source_of(module: ModuleType) -> ModuleType:
    """``module`` loaded again from its ``.py`` (its relative imports resolve in the same
    package, to whatever is imported there)."""
    package, _, leaf = module.__name__.rpartition(".")
    path = Path(module.__file__ or "").with_name(f"{leaf}.py")
    spec = importlib.util.spec_from_file_location(f"{package}._source_{leaf}", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded  # dataclasses look their module up there
    spec.loader.exec_module(loaded)
    return loaded
