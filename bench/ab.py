"""Before/after: the gateway of another checkout (A) against this one (B), alternating.

    git worktree add --detach ../base <commit>      # then, in ../base: make .venv/.installed
    .venv/bin/python -m bench.ab --base ../base --runs 3 -- \\
        --brokers gateway --scenarios mqtt_qos0,amqp_1to1 --duration 8 --no-ceiling

Runs ``python -m bench <args>`` in A and in B in turn (A, B, A, B, ...), each tree with its
own bench code, venv and gateway, so both see the same drifting machine. Prints, per
scenario, each side's median deliveries/s with the runs it came from, and the median of
the per-pair ratios B/A (each pair ran back to back). Result files go to
``bench/results/ab-<stamp>-{A,B}<n>.json`` of this tree.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE / "bench" / "results"


def _run(tree: Path, args: list[str], out: Path) -> dict:
    py = tree / ".venv" / "bin" / "python"
    cmd = [str(py if py.exists() else sys.executable), "-m", "bench", *args, "--out", str(out)]
    print(f"$ (cd {tree} && {' '.join(cmd[1:])})", flush=True)
    subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _rate(run: dict, scenario: str) -> float | None:
    res = run["results"].get(scenario, {}).get("gateway", {})
    rate = res.get("del_rate") or res.get("drain_rate")
    return float(rate) if rate else None


def _cpu(run: dict, scenario: str) -> float | None:
    """The broker's CPU microseconds per message, where the scenario measures it."""
    cpu = run["results"].get(scenario, {}).get("gateway", {}).get("drain_cpu_us")
    return float(cpu) if cpu else None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout (A)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each side")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then python -m bench's")
    ns = ap.parse_args(argv)
    args = [a for a in ns.bench_args if a != "--"]
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(parents=True, exist_ok=True)
    a_runs: list[dict] = []
    b_runs: list[dict] = []
    for i in range(ns.runs):
        a_runs.append(_run(ns.base.resolve(), args, RESULTS / f"ab-{stamp}-A{i}.json"))
        b_runs.append(_run(HERE, args, RESULTS / f"ab-{stamp}-B{i}.json"))
    machine = a_runs[0].get("machine", {})
    print(f"\nA = {ns.base.resolve()}, B = {HERE}; {ns.runs} alternating runs each")
    if machine:
        print("machine: " + ", ".join(f"{k}={v}" for k, v in machine.items()))
    head = f"{'scenario':<20} {'A median/s':>12} {'B median/s':>12} {'B/A (pairs)':>12}"
    print(f"\n{head}  runs A | B")
    for scenario in a_runs[0]["results"]:
        a = [_rate(r, scenario) for r in a_runs]
        b = [_rate(r, scenario) for r in b_runs]
        pairs = [y / x for x, y in zip(a, b, strict=True) if x and y]
        if not pairs:
            continue
        am = statistics.median(x for x in a if x)
        bm = statistics.median(y for y in b if y)
        runs = " ".join(f"{x / 1000:.1f}k" for x in a if x) + " | "
        runs += " ".join(f"{y / 1000:.1f}k" for y in b if y)
        ratio = statistics.median(pairs)
        print(f"{scenario:<20} {am:>12,.0f} {bm:>12,.0f} {ratio:>11.2f}x  {runs}")
        a_cpu = [_cpu(r, scenario) for r in a_runs]
        b_cpu = [_cpu(r, scenario) for r in b_runs]
        cpu_pairs = [y / x for x, y in zip(a_cpu, b_cpu, strict=True) if x and y]
        if cpu_pairs:
            print(
                f"{'  broker CPU us/msg':<20} {statistics.median(x for x in a_cpu if x):>12.2f}"
                f" {statistics.median(y for y in b_cpu if y):>12.2f}"
                f" {statistics.median(cpu_pairs):>11.2f}x  (B/A > 1: B costs more)"
            )


if __name__ == "__main__":
    main()
