"""Shared pieces of the fuzz tests: byte mutators, stream chunking and the corpus.

Mutators take a valid encoding and damage it the way a fuzzer would: flip bits, set
"interesting" byte values (0, 0x7F, 0x80, 0xFF...), insert, delete and duplicate runs,
truncate, and splice in bytes from elsewhere. Each one is a Hypothesis strategy, so a
failure shrinks to the fewest, simplest mutations.

The corpus (``tests/fuzz/corpus/<area>/``) holds the inputs that once found a bug. A file
is ``NAME.hex`` (hex digits; whitespace ignored; lines starting with ``#`` are comments
that say what the input broke) or ``NAME.bin`` (raw bytes). Each fuzz module replays the
files of its area through the same checks its fuzzers apply; the name's prefix (up to the
first ``-``) tells the module which check to use.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import strategies as st

CORPUS = Path(__file__).parent / "corpus"

#: ``LMQ_FUZZ_SCALE=50 pytest tests/fuzz`` runs every fuzzer 50x longer (a by-hand run).
SCALE = float(os.environ.get("LMQ_FUZZ_SCALE", "1"))


def examples(n: int) -> int:
    """``n`` Hypothesis examples, times LMQ_FUZZ_SCALE."""
    return max(1, int(n * SCALE))


INTERESTING = (0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xC0, 0xCE, 0xFE, 0xFF)


def read_corpus_file(path: Path) -> bytes:
    if path.suffix == ".bin":
        return path.read_bytes()
    lines = path.read_text("ascii").splitlines()
    return bytes.fromhex("".join(ln for ln in lines if not ln.lstrip().startswith("#")))


def corpus(area: str) -> list[object]:
    """``pytest.param(kind, data, id=file name)`` for every corpus file of ``area``."""
    files = sorted(p for p in (CORPUS / area).glob("*") if p.suffix in (".hex", ".bin"))
    return [
        pytest.param(p.stem.split("-", 1)[0], read_corpus_file(p), id=p.name) for p in files
    ]


@st.composite
def mutate(draw: st.DrawFn, data: bytes, max_mutations: int = 4) -> bytes:
    """``data`` with 1..max_mutations random edits (never returns it unchanged on purpose,
    though an edit may happen to be a no-op)."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, max_mutations))):
        op = draw(st.sampled_from(
            ("flip", "set", "interesting", "insert", "delete", "duplicate", "truncate",
             "swap")))
        n = len(buf)
        if op == "insert" or not n:
            at = draw(st.integers(0, n))
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
            continue
        at = draw(st.integers(0, n - 1))
        if op == "flip":
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            buf[at] = draw(st.integers(0, 255))
        elif op == "interesting":
            buf[at] = draw(st.sampled_from(INTERESTING))
        elif op == "delete":
            del buf[at : at + draw(st.integers(1, 8))]
        elif op == "duplicate":
            run = buf[at : at + draw(st.integers(1, 16))]
            buf[at:at] = run
        elif op == "truncate":
            del buf[at:]
        else:  # swap two bytes
            other = draw(st.integers(0, n - 1))
            buf[at], buf[other] = buf[other], buf[at]
    return bytes(buf)


@st.composite
def splice(draw: st.DrawFn, first: bytes, second: bytes) -> bytes:
    """A prefix of ``first`` followed by a suffix of ``second`` (a cut-and-paste stream)."""
    a = draw(st.integers(0, len(first)))
    b = draw(st.integers(0, len(second)))
    return first[:a] + second[b:]


@st.composite
def chunked(draw: st.DrawFn, data: bytes, max_chunks: int = 12) -> list[bytes]:
    """``data`` cut at random points (what a socket might deliver)."""
    if not data:
        return []
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)),
                                    max_size=max_chunks - 1))))
    bounds = [0, *[c for c in cuts if c < len(data)], len(data)]
    return [data[i:j] for i, j in zip(bounds, bounds[1:], strict=False) if j > i]
