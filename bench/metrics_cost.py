"""The cost of counting one message: the gateway's hand-written registry
(gateway.metrics) against the prometheus_client library (issue 31, "Metrics"). Not a
test: run it by hand (prometheus_client is not a dependency; install it to compare).

    .venv/bin/python -m bench.metrics_cost [--n 2000000] [--repeat 5]

(as a module: run as a script, bench/http.py would hide the standard library's http,
which prometheus_client imports)

Prints ns per call, the best of ``--repeat`` runs, for what a hot path does per
message:

- ``int += 1``: what the MQTT and AMQP front ends do per message (a plain attribute,
  copied into the counter at scrape time);
- an unlabelled ``Counter.inc()``;
- a labelled ``inc(qos="1")`` (the hand-written registry looks the label tuple up per
  call; prometheus_client's ``labels(...)`` does too, and returns a child);
- prometheus_client with the child kept (``child.inc()``, its recommended hot-path use);
- a scrape of 100 labelled series (``render`` / ``generate_latest``).
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit

from gateway.metrics import Registry


def best(stmt: str, setup: str, n: int, repeat: int, ns: dict[str, object]) -> float:
    times = timeit.repeat(stmt, setup, number=n, repeat=repeat, globals=ns)
    return min(times) / n * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat

    class Front:
        received = 0

    ours = Registry()
    plain = ours.counter("lmq_plain_total", "plain")
    labelled = ours.counter("lmq_labelled_total", "labelled", ("qos",))
    for i in range(100):
        labelled.inc(qos=str(i))
    ns: dict[str, object] = {"front": Front(), "plain": plain, "labelled": labelled, "ours": ours}
    rows = [
        ("int += 1 (front-end attribute)", best("front.received += 1", "", n, repeat, ns)),
        ("gateway.metrics Counter.inc()", best("plain.inc()", "", n, repeat, ns)),
        ("gateway.metrics Counter.inc(qos='1')", best("labelled.inc(qos='1')", "", n, repeat, ns)),
        ("gateway.metrics render, 100 series", best("ours.render()", "", 2000, repeat, ns)),
    ]
    try:
        import prometheus_client as pc
    except ImportError:
        print(
            "prometheus_client not installed: only the hand-written registry measured",
            file=sys.stderr,
        )
    else:
        reg = pc.CollectorRegistry()
        p_plain = pc.Counter("plain", "plain", registry=reg)
        p_labelled = pc.Counter("labelled", "labelled", ["qos"], registry=reg)
        for i in range(100):
            p_labelled.labels(qos=str(i)).inc()
        child = p_labelled.labels(qos="1")
        ns.update(p_plain=p_plain, p_labelled=p_labelled, child=child, reg=reg, pc=pc)
        rows += [
            ("prometheus_client Counter.inc()", best("p_plain.inc()", "", n, repeat, ns)),
            (
                "prometheus_client labels(qos='1').inc()",
                best("p_labelled.labels(qos='1').inc()", "", n, repeat, ns),
            ),
            ("prometheus_client child.inc() (child kept)", best("child.inc()", "", n, repeat, ns)),
            (
                "prometheus_client generate_latest, 100 series",
                best("pc.generate_latest(reg)", "", 2000, repeat, ns),
            ),
        ]
    load = os.getloadavg()
    print(f"# ns per call, best of {repeat} x {n:,} (loadavg {load[0]:.2f} {load[1]:.2f})")
    for name, value in rows:
        print(f"{name:48} {value:10.1f}")


if __name__ == "__main__":
    main()
