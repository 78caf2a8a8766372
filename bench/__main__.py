"""``python -m bench``: the gateway beside Mosquitto, RabbitMQ and amqtt, in one run.

    .venv/bin/python -m bench --scale 0.01 --duration 2            # smoke run, everything
    .venv/bin/python -m bench --scenarios mqtt_qos0,mqtt_qos1,mqtt_fanout_qos0,mqtt_fanout_qos1
    .venv/bin/python -m bench --brokers gateway,mosquitto --scenarios mqtt_backlog

For every scenario, every selected broker is started fresh (own data directory, own
ports on 127.0.0.1), driven by the same single-process load generator, and stopped.
Prints the machine, the generator's ceiling, one table per scenario; writes
``bench/results/<date>-<machine>.json`` and a PNG chart beside it. See
docs/benchmarks-peers.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import resource
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import psutil

from bench import ceiling, peers, report
from bench.scenarios import DESCRIPTIONS, SCENARIOS, Config, Skip

RESULTS = Path(__file__).resolve().parent / "results"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--scale", type=float, default=1.0, help="multiply every count (0.01 = smoke run)"
    )
    ap.add_argument(
        "--duration", type=float, default=10.0, help="measured seconds per throughput run"
    )
    ap.add_argument(
        "--warmup", type=float, default=None, help="uncounted seconds first [min(2, duration/2)]"
    )
    ap.add_argument(
        "--brokers", default=",".join(peers.ALL), help=f"comma list of {','.join(peers.ALL)}"
    )
    ap.add_argument(
        "--scenarios", default="all", help=f"comma list or 'all': {','.join(SCENARIOS)}"
    )
    ap.add_argument("--payload", type=int, default=100, help="payload bytes (>= 16)")
    ap.add_argument(
        "--window", type=int, default=1000, help="messages in flight end to end (1 -> 1)"
    )
    ap.add_argument(
        "--durability", choices=["async", "sync"], default="async", help="the gateway's"
    )
    ap.add_argument(
        "--phase-cap",
        type=float,
        default=300.0,
        help="seconds bound of a connect/publish/drain phase",
    )
    ap.add_argument(
        "--no-ceiling", action="store_true", help="skip the generator ceiling measurement"
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="JSON path [bench/results/<date>-<machine>.json]"
    )
    return ap.parse_args(argv)


def _raise_nofile() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (1_048_576, 200_000, 100_000):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            return want, want
        except (ValueError, OSError):
            continue
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard, hard


def _epmd_pids() -> set[int]:
    pids = set()
    for p in psutil.process_iter(["name"]):
        if p.info["name"] == "epmd":
            pids.add(p.pid)
    return pids


async def _run_one(broker: peers.Broker, scenario: str, cfg: Config) -> dict[str, Any]:
    fn = SCENARIOS[scenario]
    bound = cfg.phase_cap * 3 + cfg.duration + cfg.warmup + 60
    t0 = time.perf_counter()
    try:
        await asyncio.get_running_loop().run_in_executor(None, broker.start)
    except Exception as exc:
        return {"error": f"start failed: {exc}"}
    try:
        res = await asyncio.wait_for(fn(broker, cfg), bound)
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        return res
    except Skip as exc:
        return {"skipped": str(exc)}
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        await asyncio.get_running_loop().run_in_executor(None, broker.stop)
        gc.collect()


async def main_async(ns: argparse.Namespace) -> int:
    scen = (
        list(SCENARIOS)
        if ns.scenarios == "all"
        else [s.strip() for s in ns.scenarios.split(",") if s.strip()]
    )
    bad = [s for s in scen if s not in SCENARIOS]
    names = [b.strip() for b in ns.brokers.split(",") if b.strip()]
    bad += [b for b in names if b not in peers.ALL]
    if bad:
        print(f"unknown scenario/broker: {', '.join(bad)}", file=sys.stderr)
        return 2
    if ns.payload < 16:
        print("--payload must be at least 16 bytes (timestamp + sequence)", file=sys.stderr)
        return 2
    nofile = _raise_nofile()
    cfg = Config(
        scale=ns.scale,
        duration=ns.duration,
        warmup=ns.warmup if ns.warmup is not None else min(2.0, ns.duration / 2),
        payload=ns.payload,
        window=ns.window,
        phase_cap=ns.phase_cap,
    )
    mach = report.machine()
    mach["nofile"] = nofile[0]
    print(
        f"machine: {mach['host']}, {mach['cpus']} cpus ({mach['cpu_model']}), "
        f"{mach['memory_gib']} GiB, "
        f"python {mach['python']}, RLIMIT_NOFILE {nofile[0]}"
    )
    cmd = "python -m bench " + " ".join(sys.argv[1:])
    workdir = Path(tempfile.mkdtemp(prefix="lmq-bench-"))
    brokers: list[peers.Broker] = []
    unavailable: dict[str, str] = {}
    for n in names:
        b = peers.make(n, workdir, ns.durability)
        why = b.available()
        if why:
            unavailable[n] = why
            print(f"  {n}: unavailable: {why}")
        else:
            brokers.append(b)
            print(f"  {n}: {b.version}")
    epmd_before = _epmd_pids()
    doc: dict[str, Any] = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": cmd,
        "machine": mach,
        "config": vars(cfg),
        "brokers": {b.name: b.describe() for b in brokers},
        "unavailable": unavailable,
        "results": {},
    }
    try:
        if not ns.no_ceiling:
            doc["generator_ceiling"] = ceil = await ceiling.measure(
                min(5.0, max(2.0, cfg.duration))
            )
            print(
                f"load generator ceiling (sink server, 1 connection): "
                f"QoS 0 publish {ceil['publish_qos0_per_s']:,.0f}/s, "
                f"QoS 1 publish {ceil['publish_qos1_per_s']:,.0f}/s, "
                f"QoS 0 receive {ceil['receive_qos0_per_s']:,.0f}/s"
            )
        for s in scen:
            doc["results"][s] = per = {}
            for b in brokers:
                print(f"  .. {s} on {b.name}", file=sys.stderr, flush=True)
                per[b.name] = await _run_one(b, s, cfg)
            print()
            print(report.table(s, DESCRIPTIONS[s], per), flush=True)
    finally:
        for b in brokers:
            b.stop()
        # An epmd that RabbitMQ's start brought up is ours to stop (by PID).
        for pid in _epmd_pids() - epmd_before:
            try:
                psutil.Process(pid).terminate()
            except psutil.NoSuchProcess:
                pass
        shutil.rmtree(workdir, ignore_errors=True)
        out = ns.out or RESULTS / f"{dt.date.today().isoformat()}-{mach['host']}.json"
        doc["ratios"] = _ratios(doc["results"])
        report.write_json(out, doc)
        png = out.with_suffix(".png")
        if report.chart(png, doc["results"], [b.name for b in brokers]):
            print(f"\nwrote {out} and {png}")
        else:
            print(f"\nwrote {out}")
    return 0


def _ratios(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for s, per in results.items():
        _, primary, higher = report.KINDS[report.kind(s)]
        ours = per.get("gateway", {}).get(primary)
        out[s] = {
            b: report.ratio(ours, r.get(primary), higher) for b, r in per.items() if b != "gateway"
        }
    return out


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
