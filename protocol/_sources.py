"""``LMQ_NO_EXTENSIONS=1``: import the Python source of a compiled module, not its
extension (setup.py compiles some modules with mypyc and puts the extension beside the
``.py``, where Python's import would prefer it). For tests of the pure-Python twins, for
profiling at the Python level, and for a machine where an extension misbehaves.

A meta-path finder put first: for a submodule of the given packages it returns the spec
of the ``.py`` file in the package directory, if there is one; anything else falls
through to the normal finders.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _SourceFirst(importlib.abc.MetaPathFinder):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = prefixes

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith(self.prefixes):
            return None
        leaf = fullname.rpartition(".")[2]
        for entry in path:
            source = os.path.join(entry, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def prefer_sources(*prefixes: str) -> None:
    """Import the ``.py`` source of every submodule whose name starts with a prefix
    (``"protocol."``); call it before those modules are first imported."""
    if not any(isinstance(f, _SourceFirst) and f.prefixes == prefixes for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(prefixes))


def enabled() -> bool:
    """Whether the environment asks for the Python sources (``LMQ_NO_EXTENSIONS``)."""
    return bool(os.environ.get("LMQ_NO_EXTENSIONS"))
