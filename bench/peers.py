"""The brokers under test: find or install each, start it on 127.0.0.1 with its own data
directory, wait until it accepts, stop it by PID.

Every broker is a :class:`Broker` with ``start()``, ``stop()``, ``kill9()`` and
``restart()``; a started broker knows its ``pid`` (the process whose tree psutil
watches), its ``mqtt_port`` and ``amqp_port`` (``None`` where it does not speak that
protocol) and its ``version``. Every process started here is also registered with
:func:`_track`, so an ``atexit`` hook kills whatever a crash or Ctrl-C left running:
no broker outlives the run.

Peers, as a user would install them:

* ``gateway``: this repository's ``python -m cli.serve`` (durability as ``--durability``).
* ``mosquitto``: Debian's package, a generated config, persistence off as shipped.
* ``mosquitto-persist``: the same with ``persistence true`` (autosave as shipped: on
  shutdown and every 1800 s, so a kill -9 loses what was queued since).
* ``rabbitmq``: Debian's package, its own node (name, ports, Mnesia and log dirs) with
  the ``rabbitmq_mqtt`` plugin; epmd is told to bind 127.0.0.1 only.
* ``amqtt``: PyPI's broker (already in the venv), anonymous auth, no $SYS plugin.

Both Mosquitto instances and amqtt have ``max_queued_messages`` unlimited where the
broker has such a knob (Mosquitto drops QoS 1 messages past 1,000 queued per client by
default, which would count as loss in the backlog scenario rather than show memory).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"

_LIVE: dict[int, subprocess.Popen[bytes]] = {}


def _track(proc: subprocess.Popen[bytes]) -> None:
    _LIVE[proc.pid] = proc


def _untrack(proc: subprocess.Popen[bytes]) -> None:
    _LIVE.pop(proc.pid, None)


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE.values()):
        _kill_tree(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    _LIVE.clear()


def _kill_tree(pid: int, sig: int) -> None:
    """Signal ``pid`` and its descendants (by PID, never by name)."""
    try:
        parent = psutil.Process(pid)
        procs = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_accepts(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> float:
    """Poll until 127.0.0.1:``port`` accepts a TCP connection; return the seconds taken."""
    t0 = time.perf_counter()
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return time.perf_counter() - t0
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode} before accepting on {port}")
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"nothing accepts on 127.0.0.1:{port} after {timeout:.0f} s")
        time.sleep(0.05)


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def ensure_apt(binary: str, package: str) -> str | None:
    """Path of ``binary``, installing Debian's ``package`` once if it is missing."""
    path = shutil.which(binary) or (
        f"/usr/sbin/{binary}" if Path(f"/usr/sbin/{binary}").exists() else None
    )
    if path:
        return path
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", package], env=env, capture_output=True, check=False)
    return shutil.which(binary) or (
        f"/usr/sbin/{binary}" if Path(f"/usr/sbin/{binary}").exists() else None
    )


class Broker:
    name = "broker"
    speaks_amqp = False
    speaks_mqtt = True
    start_timeout = 60.0

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.data_dir = workdir / self.name
        self.proc: subprocess.Popen[bytes] | None = None
        self.mqtt_port: int | None = None
        self.amqp_port: int | None = None
        #: RocketMQ remoting (the gateway serves it on its unified port); None elsewhere.
        self.remoting_port: int | None = None
        #: RocketMQ 5 gRPC's dedicated port (the gateway's ``grpc_port``); None elsewhere.
        self.grpc_port: int | None = None
        self.version = "?"
        self.log_path = workdir / f"{self.name}.log"
        self._log_start = 0  # where this start's output begins in log_path

    # -- overridden per broker ---------------------------------------------------------
    def available(self) -> str | None:
        """``None`` when the broker can run here, else why not."""
        return None

    def _command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Create config files in ``data_dir`` (first start only)."""

    def _wait_ready(self) -> None:
        port = self.mqtt_port or self.amqp_port
        assert port is not None
        wait_accepts(port, self.start_timeout, self.proc)
        if self.amqp_port and self.mqtt_port:
            wait_accepts(self.amqp_port, self.start_timeout, self.proc)

    # -- shared -------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, fresh: bool = True) -> float:
        """Start (wiping the data dir when ``fresh``); return seconds until it accepts.

        A fresh start whose broker fails to bind a port it was given (``free_port`` only
        finds a port free a moment before the broker binds it: another process, a parallel
        test, may take it in between; RabbitMQ binds its MQTT listener seconds after the
        start) is retried with new ports, twice at most.
        """
        for attempt in range(3):
            try:
                return self._start_once(fresh)
            except RuntimeError:
                if not fresh or attempt == 2 or not self._port_was_taken():
                    raise
        raise AssertionError("unreachable")

    def _port_was_taken(self) -> bool:
        """Whether the broker's logs of this start say a port was already in use."""
        logs = [(self.log_path, self._log_start), *((p, 0) for p in self.data_dir.glob("**/*.log"))]
        for path, start in logs:
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace").lower()
            except OSError:
                continue
            if "eaddrinuse" in text or "address already in use" in text:
                return True
        return False

    def _start_once(self, fresh: bool) -> float:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        if fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir.mkdir(parents=True)
            self.mqtt_port = free_port() if self.speaks_mqtt else None
            self.amqp_port = free_port() if self.speaks_amqp else None
            self._prepare()
        cmd, env = self._command()
        t0 = time.perf_counter()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd,
            cwd=self.data_dir,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        _track(self.proc)
        try:
            self._wait_ready()
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}: {log_tail(self.log_path)}") from None
        except BaseException:
            self.stop()
            raise
        return time.perf_counter() - t0

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            _kill_tree(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_tree(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self._after_stop(proc.pid)
        _untrack(proc)

    def _after_stop(self, pid: int) -> None:
        # Children that outlived their parent (beam under the rabbitmq script).
        pass

    def kill9(self) -> None:
        """SIGKILL the whole broker process tree, as a crash would."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        _kill_tree(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _untrack(proc)
        self._after_kill()

    def _after_kill(self) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "version": self.version}


class Gateway(Broker):
    name = "gateway"
    speaks_amqp = True
    start_timeout = 60.0

    def __init__(self, workdir: Path, durability: str = "async") -> None:
        super().__init__(workdir)
        self.durability = durability
        self.version = _gateway_version()
        self.amqp_error = ""  # why the AMQP listener could not start, when it could not

    def _command(self) -> tuple[list[str], dict[str, str]]:
        py = str(VENV_PY if VENV_PY.exists() else sys.executable)
        prof = os.environ.get("LMQ_BENCH_CPROFILE")
        return [
            py,
            *(["-m", "cProfile", "-o", prof] if prof else []),
            "-m",
            "cli.serve",
            "--data-dir",
            str(self.data_dir / "store"),
            "--mqtt-port",
            str(self.mqtt_port),
            "--amqp-port",
            str(self.amqp_port or 0),
            "--unified-port",
            str(self.remoting_port or 0),
            # a free ephemeral port of the run (never the fixed 8081 runs could collide on):
            # grpc_1to1 measures the dedicated listener, gRPC's own access point
            "--grpc-port",
            str(self.grpc_port or 0),
            "--max-connections",
            "200000",
            "--durability",
            self.durability,
            "--log-level",
            "warning",
        ], {"PYTHONPATH": str(ROOT)}

    def _start_once(self, fresh: bool) -> float:
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        # cli.serve must be importable: run from the repository root, data under data_dir.
        if fresh:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir.mkdir(parents=True)
            self.mqtt_port = free_port()
            self.amqp_port = free_port()
            self.remoting_port = free_port()
            self.grpc_port = free_port()
        cmd, env = self._command()
        t0 = time.perf_counter()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        _track(self.proc)
        try:
            assert self.mqtt_port is not None
            wait_accepts(self.mqtt_port, self.start_timeout, self.proc)
        except RuntimeError:
            self.stop()
            if not self.amqp_port:
                raise RuntimeError(f"gateway exited: {log_tail(self.log_path)}") from None
            # The AMQP front end is young: run the MQTT scenarios without it.
            self.amqp_error = log_tail(self.log_path)
            self.amqp_port = None
            return self.start(fresh=False) + (time.perf_counter() - t0)
        except BaseException:
            self.stop()
            raise
        return time.perf_counter() - t0

    def describe(self) -> dict[str, object]:
        d = {**super().describe(), "durability": self.durability}
        if self.amqp_error:
            d["amqp_error"] = self.amqp_error
        return d


def _gateway_version() -> str:
    try:
        from importlib.metadata import version

        v = version("lmq-gateway")
    except Exception:
        v = "dev"
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        rev = ""
    return f"{v}+{rev}" if rev else v


class Mosquitto(Broker):
    name = "mosquitto"
    persistence = False

    def available(self) -> str | None:
        self.binary = ensure_apt("mosquitto", "mosquitto")
        if not self.binary:
            return "mosquitto not installed and apt-get install mosquitto failed"
        out = subprocess.run(
            [self.binary, "-h"], capture_output=True, text=True, check=False
        ).stdout
        self.version = out.split("version", 1)[-1].split()[0] if "version" in out else "?"
        return None

    def _prepare(self) -> None:
        conf = [
            f"listener {self.mqtt_port} 127.0.0.1",
            "allow_anonymous true",
            "max_queued_messages 0",
            "max_connections -1",
            f"persistence {'true' if self.persistence else 'false'}",
            f"persistence_location {self.data_dir}/",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
        ]
        (self.data_dir / "mosquitto.conf").write_text("\n".join(conf) + "\n")

    def _command(self) -> tuple[list[str], dict[str, str]]:
        return [self.binary, "-c", str(self.data_dir / "mosquitto.conf")], {}

    def describe(self) -> dict[str, object]:
        return {**super().describe(), "persistence": self.persistence}


class MosquittoPersist(Mosquitto):
    name = "mosquitto-persist"
    persistence = True


class RabbitMQ(Broker):
    """A RabbitMQ node of our own: node name, ports and directories under ``data_dir``."""

    name = "rabbitmq"
    speaks_amqp = True
    start_timeout = 120.0
    SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
    CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")

    def available(self) -> str | None:
        if not self.SERVER.exists():
            ensure_apt("rabbitmq-server", "rabbitmq-server")
        if not self.SERVER.exists():
            return "rabbitmq-server not installed and apt-get install rabbitmq-server failed"
        try:
            out = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            erl = subprocess.run(
                ["dpkg-query", "-W", "-f=${Version}", "erlang-base"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            self.version = f"{out} (erlang {erl})"
        except OSError:
            pass
        return None

    def _env(self) -> dict[str, str]:
        d = self.data_dir
        node = f"lmqbench{os.getpid()}@localhost"
        self.node = node
        return {
            "HOME": str(d),  # the Erlang cookie lands here
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_LOGS": str(d / "log" / "rabbit.log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_ENABLED_PLUGINS": "rabbitmq_mqtt",
            "RABBITMQ_PID_FILE": str(d / "rabbit.pid"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            # the Erlang distribution listener too (it binds every interface otherwise)
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def _prepare(self) -> None:
        self.dist_port = free_port()
        d = self.data_dir
        (d / "log").mkdir()
        (d / "rabbitmq-env.conf").write_text("")
        (d / "advanced.config").write_text(
            "[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].\n")
        (d / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (d / "rabbitmq.conf").write_text(
            "\n".join(
                [
                    f"listeners.tcp.default = 127.0.0.1:{self.amqp_port}",
                    f"mqtt.listeners.tcp.default = 127.0.0.1:{self.mqtt_port}",
                    "mqtt.allow_anonymous = true",
                    "loopback_users = none",
                    "vm_memory_high_watermark.relative = 0.6",
                    "disk_free_limit.absolute = 50MB",
                    "log.console = false",
                ]
            )
            + "\n"
        )

    def _command(self) -> tuple[list[str], dict[str, str]]:
        env = self._env()
        self._env_cache = env
        return [str(self.SERVER)], env

    def _wait_ready(self) -> None:
        # The MQTT listener opens after the AMQP one, when the plugin has booted.
        assert self.mqtt_port and self.amqp_port
        wait_accepts(self.amqp_port, self.start_timeout, self.proc)
        wait_accepts(self.mqtt_port, self.start_timeout, self.proc)

    def _after_kill(self) -> None:
        # The node's epmd registration goes with it; epmd itself stays (shared, loopback).
        pass


class Amqtt(Broker):
    name = "amqtt"

    def available(self) -> str | None:
        self.binary = str(Path(VENV_PY).parent / "amqtt")
        if not Path(self.binary).exists():
            found = shutil.which("amqtt")
            if not found:
                return "amqtt console script not found (pip install amqtt)"
            self.binary = found
        out = subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, check=False
        ).stdout
        self.version = out.strip() or "?"
        return None

    def _prepare(self) -> None:
        (self.data_dir / "amqtt.yaml").write_text(
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: 127.0.0.1:{self.mqtt_port}\n"
            "    max_connections: 0\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )

    def _command(self) -> tuple[list[str], dict[str, str]]:
        return [self.binary, "-c", str(self.data_dir / "amqtt.yaml")], {}


ALL = ["gateway", "mosquitto", "mosquitto-persist", "rabbitmq", "amqtt"]


def make(name: str, workdir: Path, durability: str = "async") -> Broker:
    if name == "gateway":
        return Gateway(workdir, durability)
    return {
        "mosquitto": Mosquitto,
        "mosquitto-persist": MosquittoPersist,
        "rabbitmq": RabbitMQ,
        "amqtt": Amqtt,
    }[name](workdir)
