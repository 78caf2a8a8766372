"""Tables on stdout, the JSON results file and the PNG chart."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path
from typing import Any

import psutil

# scenario kind -> (columns shown, primary metric for the ratio, higher is better)
THROUGHPUT_COLS = [
    ("pub_rate", "pub/s"),
    ("del_rate", "deliv/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("max_ms", "max ms"),
    ("cpu_pct", "CPU %"),
    ("gen_cpu_pct", "gen CPU %"),
    ("peak_rss_mb", "RSS MB"),
    ("lost", "lost"),
]
KINDS: dict[str, tuple[list[tuple[str, str]], str, bool]] = {
    "throughput": (THROUGHPUT_COLS, "del_rate", True),
    "mqtt_connections": (
        [
            ("connected", "conns"),
            ("connect_rate", "conn/s"),
            ("kb_per_conn", "KB/conn"),
            ("rss_after_mb", "RSS MB"),
            ("cpu_pct", "CPU %"),
        ],
        "kb_per_conn",
        False,
    ),
    "mqtt_backlog": (
        [
            ("acked", "acked"),
            ("pub_rate", "pub/s"),
            ("rss_idle_mb", "RSS idle"),
            ("rss_backlog_mb", "RSS backlog"),
            ("drain_rate", "drain/s"),
            ("lost", "lost"),
            ("peak_rss_mb", "peak RSS"),
        ],
        "drain_rate",
        True,
    ),
    "mqtt_kill9": (
        [
            ("acked", "acked"),
            ("pub_rate", "pub/s"),
            ("restart_to_serve_s", "restart s"),
            ("sessions_present", "sess kept"),
            ("drained", "drained"),
            ("lost", "lost"),
        ],
        "restart_to_serve_s",
        False,
    ),
    "remoting_topics": (
        [
            ("topics", "topics"),
            ("lmqs", "LMQs"),
            ("create_rate", "topics/s"),
            ("rss_after_mb", "RSS MB"),
            ("kb_per_topic", "KB/topic"),
            ("open_files_after", "open files"),
            ("route_p50_ms", "route p50 ms"),
            ("route_p99_ms", "route p99 ms"),
        ],
        "route_p99_ms",
        False,
    ),
}


def kind(scenario: str) -> str:
    return scenario if scenario in KINDS else "throughput"


def machine() -> dict[str, Any]:
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def ratio(ours: Any, theirs: Any, higher_better: bool) -> float | None:
    """Our figure relative to theirs, oriented so that > 1 means we are better."""
    if not isinstance(ours, (int, float)) or not isinstance(theirs, (int, float)):
        return None
    if higher_better:
        return round(ours / theirs, 3) if theirs else None
    return round(theirs / ours, 3) if ours else None


def table(scenario: str, title: str, results: dict[str, dict[str, Any]]) -> str:
    cols, primary, higher = KINDS[kind(scenario)]
    ours = results.get("gateway", {})
    head = ["broker", *[c[1] for c in cols], "ours vs it"]
    rows = [head]
    for name, r in results.items():
        if "skipped" in r or "error" in r:
            rows.append(
                [
                    name,
                    (f"skipped: {r['skipped']}" if "skipped" in r else f"error: {r['error']}")[:90],
                ]
            )
            continue
        rt = ratio(ours.get(primary), r.get(primary), higher) if name != "gateway" else None
        rows.append([name, *[_fmt(r.get(c[0])) for c in cols], "-" if rt is None else f"{rt:.2f}x"])
    full = [r for r in rows if len(r) == len(head)]
    widths = [max(len(r[i]) for r in full) for i in range(len(head))]
    lines = [
        f"== {scenario}: {title}",
        f"   (ratio: gateway vs broker on {primary}, >1 = gateway better)",
    ]
    for r in rows:
        if len(r) == 2:
            lines.append("  " + r[0].ljust(widths[0]) + "  " + r[1])
        else:
            lines.append(
                "  "
                + "  ".join(
                    c.rjust(w) if i else c.ljust(w)
                    for i, (c, w) in enumerate(zip(r, widths, strict=True))
                )
            )
    return "\n".join(lines)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def chart(path: Path, results: dict[str, dict[str, dict[str, Any]]], brokers: list[str]) -> bool:
    """Grouped bars: deliveries/s per throughput scenario and broker (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scen = [s for s in results if kind(s) == "throughput"]
    if not scen:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(scen) + 2), 4.5))
    width = 0.8 / max(1, len(brokers))
    lowest = None
    for j, b in enumerate(brokers):
        # a broker skipped in (or failing) a scenario gets no bar there, not a tiny one
        points = [
            (i + (j - (len(brokers) - 1) / 2) * width, v)
            for i, s in enumerate(scen)
            if (v := results[s].get(b, {}).get("del_rate") or 0) > 0
        ]
        if points:
            ax.bar([x for x, _ in points], [v for _, v in points], width, label=b)
            low = min(v for _, v in points)
            lowest = low if lowest is None else min(lowest, low)
    ax.set_xticks(range(len(scen)))
    ax.set_xticklabels(scen, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    if lowest is not None:
        ax.set_ylim(bottom=lowest / 3)
    ax.set_ylabel("deliveries/s (log)")
    ax.set_title("LMQ gateway vs peers, same machine, same load generator")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
