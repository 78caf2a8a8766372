"""Sans-IO protocol packages: bytes in, events out; no sockets, no asyncio, no storage.

Some modules here are compiled (``setup.py``); ``LMQ_NO_EXTENSIONS=1`` in the environment
makes every ``protocol.*`` module import from its Python source instead.
"""

from protocol import _sources

if _sources.enabled():
    _sources.prefer_sources("protocol.")
