"""README.md's quick tour, run as written: the ```sh blocks of its "A quick tour" section,
read from README.md itself, in order, against a real gateway (``lmq serve``, as
``make run`` starts it) on free ports. A block fails the test when it exits non-zero or
when a ``#> text`` line under it names text its output lacks (each step shows its
effect). So the tour cannot rot: change the README and this runs the change.

How a block is run: ``bash -e -o pipefail -c BLOCK`` in a scratch directory (so the
tour's ``./lmq-data`` is the gateway's data directory there), with the README's ports
(1883, 5672, 8080, 8081) replaced by the gateway's and ``.venv/bin/`` by this
interpreter's directory. Two lines are the reader's, not the shell's: ``make run``
starts the gateway (restarts it, on the same data directory) and a comment naming
``Ctrl-C`` stops it before the block runs. After a block that adds a user the test
waits, bounded, for the gateway's ``authentication on`` log line, as the README says
to expect it within a second.

Not run: the ``lmq analyze fanout`` line (Spark). Starting a JVM and the job took
2 min 57 s on the tour's data at load 16 on the 2-core development machine, too much
for every CI run; tests/spark/test_spark_sys.py and tests/cli/test_analyze_cli.py run
the job itself.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.gateway.gateway_process import GatewayProcess

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README's ports, by the listener that serves them.
PORTS = {"1883": "mqtt", "5672": "amqp", "8080": "unified", "8081": "grpc"}
#: Bound on one block (the slowest waits: a 10 s mosquitto_sub -W, a client's startup).
BLOCK_TIMEOUT = 120.0
#: Bound on the gateway turning authentication on after the users file appears.
AUTH_WAIT = 20.0
SKIPPED = ("lmq analyze ",)


@dataclass
class Block:
    text: str
    #: What its output must contain, from its ``#> `` lines.
    expect: list[str]


def tour_blocks(readme: str) -> list[Block]:
    """The ```sh blocks of the "A quick tour" section, in order."""
    start = readme.index("\n## A quick tour")
    end = readme.find("\n## ", start + 1)
    section = readme[start : end if end >= 0 else len(readme)]
    blocks = []
    for text in re.findall(r"^```sh\n(.*?)^```[ \t]*$", section, re.S | re.M):
        lines, expect, skipping = [], [], False
        for line in text.splitlines():
            if line.startswith("#> "):
                if not skipping:
                    expect.append(line[3:].strip())
                continue
            skipping = any(skip in line for skip in SKIPPED)
            if not skipping:
                lines.append(line)
        blocks.append(Block("\n".join(lines) + "\n", expect))
    return blocks


def starts_gateway(block: Block) -> bool:
    """A block of ``make run`` lines (and comments): the reader starts the gateway."""
    commands = [
        ln for ln in block.text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return bool(commands) and all(ln.startswith("make run") for ln in commands)


def test_the_tour_is_extracted_from_the_readme() -> None:
    """The extraction itself: blocks, expectations, the gateway's start and stop."""
    blocks = tour_blocks(README.read_text())
    assert len(blocks) >= 8
    assert blocks[0].text.startswith("make run")
    assert sum(map(starts_gateway, blocks)) == 2  # the start, and after Ctrl-C
    assert sum("Ctrl-C" in b.text for b in blocks) == 1
    assert all(b.expect for b in blocks if not starts_gateway(b))
    assert not any("lmq analyze" in b.text for b in blocks)


def _substitute(text: str, ports: dict[str, int]) -> str:
    for readme_port, listener in PORTS.items():
        text = re.sub(rf"\b{readme_port}\b", str(ports[listener]), text)
    return text.replace(".venv/bin/", f"{Path(sys.executable).parent}/")


def _wait_for_log(gw: GatewayProcess, text: str, bound: float) -> None:
    deadline = time.monotonic() + bound
    while not any(text in line for line in gw.output):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in the gateway's log:\n" + "".join(gw.output))
        time.sleep(0.05)


def test_readme_tour(tmp_path: Path) -> None:
    missing = [
        tool
        for tool in ("mosquitto_pub", "mosquitto_sub", "curl", "bash")
        if shutil.which(tool) is None
    ]
    assert not missing, f"the tour needs {missing} (make system-deps installs them)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMQ_")}
    env["PYTHONPATH"] = str(ROOT)
    gw: GatewayProcess | None = None
    try:
        for number, block in enumerate(tour_blocks(README.read_text()), 1):
            if "Ctrl-C" in block.text and gw is not None:
                assert gw.stop() == 0, "".join(gw.output)
                gw = None
            if starts_gateway(block):
                if gw is not None:
                    gw.stop()
                gw = GatewayProcess(tmp_path / "lmq-data").start()
                continue
            assert gw is not None or "Ctrl-C" in block.text, f"block {number}: no gateway"
            ports = gw.ports if gw is not None else dict.fromkeys(PORTS.values(), 1)
            script = _substitute(block.text, ports)
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", script],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT,
            )
            output = done.stdout + done.stderr
            where = f"README tour block {number}:\n{block.text}\nprinted:\n{output}"
            assert done.returncode == 0, f"exit status {done.returncode} in {where}"
            for text in block.expect:
                assert text in output, f"no {text!r} in the output of {where}"
            if "lmq users add" in block.text and gw is not None:
                _wait_for_log(gw, "authentication on", AUTH_WAIT)
        assert gw is not None, "the tour ends with the gateway running"
        assert "Traceback" not in "".join(gw.output), "".join(gw.output)
    finally:
        if gw is not None:
            gw.stop()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("mosquitto_pub -p 1883 -t a -m 1", "mosquitto_pub -p 11 -t a -m 1"),
        ("curl 127.0.0.1:8080/health # not 18080", "curl 127.0.0.1:33/health # not 18080"),
        ("ClientConfiguration('127.0.0.1:8081')", "ClientConfiguration('127.0.0.1:44')"),
    ],
)
def test_substitution(text: str, want: str) -> None:
    ports = {"mqtt": 11, "amqp": 22, "unified": 33, "grpc": 44}
    assert _substitute(text, ports) == want
