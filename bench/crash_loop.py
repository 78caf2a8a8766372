"""Storage crash loop: SIGKILL a writer at random moments, many times, on one data dir.

    .venv/bin/python bench/crash_loop.py                     # 20 kills
    .venv/bin/python bench/crash_loop.py --kills 100 --seed 7 --data-dir /tmp/cl

A child process appends with ``sync`` durability (an append is acknowledged after the
fsync covering it) to overlapping sets of LMQs, in batches, on small segments so that
rolls are frequent, and prints one ``ACK`` line per acknowledged append. The parent kills
it with SIGKILL at a random moment (sometimes before it has even opened the store),
opens the store itself (this is the recovery measured), and checks:

- every append acknowledged so far, in any round, reads back from every one of its LMQs
  at the offset it was acknowledged with, at the same log position, with its body;
- no LMQ's max offset is lower than after the previous restart, nor than its highest
  acknowledged offset;
- ``verify`` (every record's CRC and position, the index against the log) is ok.

Then it starts a new child on the same directory. Prints kills, acknowledged appends,
lost appends (must be 0), offset regressions (must be 0) and recovery time per restart.
``tests/test_crash_loop.py`` runs the same loop with a few kills.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = [f"dev/{i}" for i in range(16)]
SEGMENT_BYTES = 64 * 1024


def _config():  # type: ignore[no-untyped-def]
    from broker_core import Durability, StoreConfig

    return StoreConfig(
        durability=Durability.SYNC, segment_bytes=SEGMENT_BYTES, max_message_bytes=8 * 1024
    )


# -- the child: append until killed ----------------------------------------------------


def child(data_dir: str, seed: int) -> None:
    from broker_core import Message, MessageStore

    rnd = random.Random(seed)
    store = MessageStore.open(data_dir, _config())
    print("READY", flush=True)
    seq = 0
    while True:
        batch, seqs = [], []
        # batches of up to 48: a larger write widens the window between the log write
        # and the index write that a kill can land in
        for _ in range(rnd.choice((1, 2, 4, 8, 16, 48))):
            targets = rnd.sample(NAMES, rnd.randint(1, 6))
            body = f"{seed}:{seq}:".encode() + rnd.randbytes(rnd.randint(0, 3000))
            batch.append((Message(topic=f"t/{seq}", body=body), targets))
            seqs.append(seq)
            seq += 1
        results = store.append_batch(batch)  # returns after the covering fsync
        lines = []
        for (_, targets), s, r in zip(batch, seqs, results, strict=True):
            pairs = ",".join(f"{n}:{o}" for n, o in zip(targets, r.offsets, strict=True))
            lines.append(f"ACK {seed} {s} {r.position} {pairs}\n")
        sys.stdout.write("".join(lines))
        sys.stdout.flush()


# -- the parent ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ack:
    seed: int
    seq: int
    position: int
    targets: tuple[tuple[str, int], ...]


@dataclass(slots=True)
class Figures:
    kills: int = 0
    killed_before_ready: int = 0
    acked: int = 0
    lost: int = 0
    offset_regressions: int = 0
    verify_failures: int = 0
    truncated_bytes: int = 0
    replayed_records: int = 0
    recovery_s: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        rec = self.recovery_s or [0.0]
        return "\n".join(
            [
                f"kills                 {self.kills} ({self.killed_before_ready} before the"
                " child had opened the store)",
                f"acknowledged appends  {self.acked}",
                f"lost                  {self.lost}",
                f"offset regressions    {self.offset_regressions}",
                f"verify failures       {self.verify_failures}",
                f"torn bytes cut        {self.truncated_bytes}",
                f"records replayed      {self.replayed_records}",
                f"recovery per restart  median {statistics.median(rec) * 1000:.1f} ms,"
                f" max {max(rec) * 1000:.1f} ms (open after SIGKILL, {len(rec)} restarts)",
            ]
        )


def run_child_and_kill(
    data_dir: Path, seed: int, kill_after: float, after_ready: bool = False
) -> tuple[list[str], bool]:
    """Start a writer, SIGKILL it ``kill_after`` seconds after it was spawned (or, with
    ``after_ready``, after it reported READY: the start takes longer on a loaded machine,
    and a kill meant for the appends must not land before them); return the complete
    lines it printed and whether it had reported READY."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(data_dir), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    stdout = proc.stdout

    ready_seen = threading.Event()

    def read() -> None:
        for line in stdout:
            lines.append(line)
            if line == "READY\n":
                ready_seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        try:
            if after_ready:
                ready_seen.wait(timeout=60)
            proc.wait(timeout=kill_after)
            raise RuntimeError(f"the writer exited by itself with {proc.returncode}")
        except subprocess.TimeoutExpired:
            pass
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)  # acks already in the pipe count too
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stdout.close()
    ready = bool(lines) and lines[0] == "READY\n"
    return [ln for ln in lines if ln.startswith("ACK ") and ln.endswith("\n")], ready


def parse(line: str) -> Ack:
    _, seed, seq, position, pairs = line.split()
    targets = tuple((p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in pairs.split(","))
    return Ack(int(seed), int(seq), int(position), targets)


def check(data_dir: Path, acked: list[Ack], floor: dict[str, int], figures: Figures) -> None:
    """Open the store after a kill (timed) and check every promise; update ``floor``
    (each LMQ's max offset after this restart)."""
    from broker_core import MessageStore
    started = time.perf_counter()
    store = MessageStore.open(data_dir, _config())
    figures.recovery_s.append(time.perf_counter() - started)
    try:
        figures.truncated_bytes += store.recovery.truncated_bytes
        figures.replayed_records += store.recovery.replayed_records
        # Each LMQ read whole with pull (the path consumers use), then every
        # acknowledged (LMQ, offset) looked up in it.
        held: dict[str, dict[int, tuple[int, bytes]]] = {}
        for name in NAMES:
            held[name] = {}
            if store.lmq(name) is None:
                continue
            offset = 0
            while True:
                got = store.pull(name, offset, max_count=4096, max_bytes=64 << 20)
                for m in got.messages:
                    held[name][m.offset] = (m.record.position, m.body[:24])
                if got.next_offset >= got.max_offset or not got.messages:
                    break
                offset = got.next_offset
        highest: dict[str, int] = {}
        for ack in acked:
            prefix = f"{ack.seed}:{ack.seq}:".encode()
            for name, offset in ack.targets:
                highest[name] = max(highest.get(name, -1), offset)
                found = held[name].get(offset)
                if found is None or found[0] != ack.position or not found[1].startswith(prefix):
                    figures.lost += 1
                    figures.problems.append(f"lost: {ack} in {name}@{offset}: {found}")
        for name in NAMES:
            info = store.lmq(name)
            now = info.max_offset if info else 0
            if now < floor.get(name, 0) or now <= highest.get(name, -1):
                figures.offset_regressions += 1
                figures.problems.append(
                    f"{name}: max offset {now} after restart {figures.kills}, was"
                    f" {floor.get(name, 0)}, highest acknowledged {highest.get(name, -1)}"
                )
            floor[name] = max(floor.get(name, 0), now)
        report = store.verify()
        if not report.ok:
            figures.verify_failures += 1
            figures.problems.extend(f"verify: {p}" for p in report.problems)
    finally:
        store.close()


def crash_loop(
    data_dir: Path,
    kills: int,
    seed: int = 1,
    min_s: float = 0.05,
    max_s: float = 1.0,
    progress: bool = False,
) -> Figures:
    """Kill and restart a writer ``kills`` times on ``data_dir``; check after each."""
    rnd = random.Random(seed)
    figures = Figures()
    acked: list[Ack] = []
    floor: dict[str, int] = {}
    for round_ in range(kills):
        # The child takes about 0.3 s to start and open the store on an idle machine:
        # about one kill in five aims at the start and the open, the rest at the appends
        # (timed from the child's READY).
        at_start = rnd.random() < 0.2
        kill_after = rnd.uniform(0.02, 0.4) if at_start else rnd.uniform(min_s, max_s)
        lines, ready = run_child_and_kill(
            data_dir, seed * 1000 + round_, kill_after, after_ready=not at_start
        )
        figures.kills += 1
        figures.killed_before_ready += not ready
        acked.extend(parse(ln) for ln in lines)
        figures.acked = len(acked)
        check(data_dir, acked, floor, figures)
        if progress:
            print(
                f"kill {figures.kills}: {len(lines)} acks this round, {len(acked)} in all,"
                f" recovery {figures.recovery_s[-1] * 1000:.1f} ms, lost {figures.lost}",
                flush=True,
            )
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-run", type=float, default=1.0, help="longest run before a kill (s)")
    ap.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    ap.add_argument("--child", nargs=2, metavar=("DATA_DIR", "SEED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="lmq-crash-loop-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        started = time.monotonic()
        figures = crash_loop(data_dir, args.kills, args.seed, max_s=args.max_run, progress=True)
        print(figures.summary())
        print(f"wall time             {time.monotonic() - started:.1f} s")
        for problem in figures.problems[:20]:
            print("problem:", problem)
    return 1 if figures.lost or figures.offset_regressions or figures.verify_failures else 0


if __name__ == "__main__":
    sys.exit(main())
