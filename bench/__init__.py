"""Benchmarks: ``python -m bench`` (peers) and standalone scripts (storage, topic trie)."""
