"""Memory and speed figures for lmq.topic_trie (not a test: run it by hand).

    .venv/bin/python bench/topic_trie.py [--filters 1000000] [--intern]

Prints bytes per filter for 1M distinct 3-level filters in two shapes (tracemalloc,
with the RSS growth from psutil as a cross-check) and µs per ``matches`` call with
100k filters. The figures quoted in the module docstrings come from this script.
"""

from __future__ import annotations

import argparse
import gc
import random
import subprocess
import sys
import time
import tracemalloc

import psutil

from lmq.topic_space import AmqpTopicTrie
from lmq.topic_trie import TopicTrie

SHAPES = {
    # IoT-like: a shared first and last level, a distinct device id in the middle.
    "site{s}/dev{i}/temp": lambda i: f"site{i % 1000}/dev{i}/temp",
    # Worst case for the trie: no level is shared, three nodes per filter.
    "a{i}/b{i}/c{i}": lambda i: f"a{i}/b{i}/c{i}",
}


def measure_memory(count: int, shape: str, mode: str) -> float:
    """Bytes per filter for one shape; run in a fresh process so RSS is meaningful."""
    make = SHAPES[shape]
    value = object()  # one shared value: count the trie, not the values
    gc.collect()
    if mode == "tracemalloc":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    else:
        before = psutil.Process().memory_info().rss
    trie: TopicTrie[object] = TopicTrie()
    for i in range(count):
        trie.add(make(i), value)
    gc.collect()
    if mode == "tracemalloc":
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        after = psutil.Process().memory_info().rss
    # Removing everything must leave an empty root: pruning works at scale too.
    for i in range(count):
        trie.remove(make(i), value)
    assert len(trie) == 0 and trie._root.kids is None
    return (after - before) / count


def measure_memory_all(count: int) -> None:
    for shape in SHAPES:
        figures = []
        for mode in ("tracemalloc", "rss"):
            result = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--filters",
                    str(count),
                    "--shape",
                    shape,
                    "--mode",
                    mode,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            figures.append(float(result.stdout))
        print(
            f"memory {shape:22} {count:>9,} filters: {figures[0]:6.1f} B/filter "
            f"(tracemalloc), {figures[1]:6.1f} B/filter (RSS growth)"
        )


def build_filters(count: int, rng: random.Random) -> list[str]:
    filters: set[str] = set()
    while len(filters) < count:
        site, dev = rng.randrange(1000), rng.randrange(10_000)
        kind = rng.random()
        if kind < 0.70:
            filters.add(f"site{site}/dev{dev}/temp")
        elif kind < 0.80:
            filters.add(f"site{site}/dev{dev}/#")
        elif kind < 0.90:
            filters.add(f"site{site}/+/temp")
        elif kind < 0.95:
            filters.add(f"site{site}/+/+/alarm")
        else:
            filters.add(f"+/dev{dev}/temp")
    return sorted(filters)


def build_topics(count: int, rng: random.Random, tails: list[str]) -> list[str]:
    topics = []
    for _ in range(count):
        site, dev = rng.randrange(1000), rng.randrange(10_000)
        topics.append(f"site{site}/dev{dev}/{rng.choice(tails)}")
    return topics


def measure_matching(count: int) -> None:
    rng = random.Random(7)
    filters = build_filters(count, rng)
    trie: TopicTrie[int] = TopicTrie()
    amqp: AmqpTopicTrie[int] = AmqpTopicTrie()
    for index, topic_filter in enumerate(filters):
        trie.add(topic_filter, index)
        amqp.add(topic_filter.replace("/", ".").replace("+", "*"), index)
    workloads = {
        "mixed": ["temp", "status/battery", "x/alarm", "temp/raw/1"],
        "hits": ["temp"],  # every topic reaches at least its site's site{s}/+/temp
    }
    for workload, tails in workloads.items():
        topics = build_topics(20_000, rng, tails)
        keys = [topic.replace("/", ".") for topic in topics]
        for name, match, inputs in (
            ("TopicTrie", trie.matches, topics),
            ("AmqpTopicTrie", amqp.matches, keys),
        ):
            best = float("inf")
            hits = 0
            for _ in range(5):
                start = time.perf_counter()
                hits = 0
                for item in inputs:
                    hits += len(match(item))
                best = min(best, time.perf_counter() - start)
            print(
                f"match  {name + ' ' + workload:22} {count:>9,} filters: "
                f"{best / len(inputs) * 1e6:5.2f} µs/match "
                f"({hits / len(inputs):.2f} values per match)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filters", type=int, default=1_000_000)
    parser.add_argument("--match-filters", type=int, default=100_000)
    parser.add_argument("--shape", choices=SHAPES, help="(internal) one memory run")
    parser.add_argument("--mode", choices=["tracemalloc", "rss"], default="tracemalloc")
    args = parser.parse_args()
    if args.shape:
        print(measure_memory(args.filters, args.shape, args.mode))
        return
    measure_matching(args.match_filters)
    measure_memory_all(args.filters)


if __name__ == "__main__":
    main()
