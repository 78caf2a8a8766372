"""Medians over several ``python -m bench`` result files of the same scenarios.

    python -m bench.medians bench/results/A.json bench/results/B.json bench/results/C.json

Prints, per scenario, each broker's median deliveries/s (and the runs it came from) and
the median of the gateway's per-run ratios to it (ratios are taken within each run,
where both brokers shared the machine's condition, then the median of those). Brokers
missing from some runs are reported over the runs that have them.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(paths: list[str]) -> None:
    runs = [json.loads(Path(p).read_text()) for p in paths]
    scenarios: list[str] = []
    for run in runs:
        for name in run["results"]:
            if name not in scenarios:
                scenarios.append(name)
    print(f"{len(runs)} runs: " + ", ".join(Path(p).name for p in paths))
    for name in scenarios:
        print(f"\n== {name}")
        print(f"  {'broker':<18} {'median deliv/s':>14}  {'runs':<32} {'median ratio':>12}")
        brokers: list[str] = []
        for run in runs:
            for b, res in run["results"].get(name, {}).items():
                if b not in brokers and "del_rate" in res:
                    brokers.append(b)
        for b in brokers:
            rates = [run["results"][name][b]["del_rate"] for run in runs
                     if "del_rate" in run["results"].get(name, {}).get(b, {})]
            ratios = [run["ratios"][name][b] for run in runs
                      if b in run.get("ratios", {}).get(name, {})]
            ratio = f"{statistics.median(ratios):.2f}x" if ratios else "-"
            each = ", ".join(f"{r / 1000:.1f}k" for r in rates)
            print(f"  {b:<18} {statistics.median(rates):>14,.0f}  {each:<32} {ratio:>12}")
        print(f"  {'':<18} {'p50 / p99 ms, CPU %, peak RSS MB (medians)'}")
        for b in brokers:
            rows = [run["results"][name][b] for run in runs
                    if "del_rate" in run["results"].get(name, {}).get(b, {})]
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("p50_ms", "p99_ms", "cpu_pct", "peak_rss_mb")}
            gen = [r["gen_cpu_pct"] for r in rows if r.get("gen_cpu_pct") is not None]
            gen_txt = f", generator {statistics.median(gen):.0f} %" if gen else ""
            print(f"  {b:<18} {med['p50_ms']:.3g} / {med['p99_ms']:.3g}, "
                  f"{med['cpu_pct']:.0f} %, {med['peak_rss_mb']:.0f} MB{gen_txt}")


if __name__ == "__main__":
    main(sys.argv[1:])
