"""The suite's settings (Hypothesis without time limits, xdist groups) and the Spark
fixtures: one local[2] session for the whole run, and a segment writer.

The writer lays records out exactly as the store does (``<20-digit base>.log`` under
``commitlog/``, position = segment base + offset, a record never spans segments), using
only ``encode_record``, so the reader is tested before and independently of the store.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from broker_core.record import Message, RecordType, encode_record

# No time limits on Hypothesis examples: its default 200 ms deadline (and its "too slow"
# health check) are timed assertions, which fail on a loaded machine (CI runs four
# workers on two cores) and say nothing about correctness; speed is measured in bench/.
settings.register_profile("lmq", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lmq")


def _stale_extensions(root: Path) -> list[str]:
    """Compiled modules (setup.py) older than their ``.py``: Python would import the
    extension, so the tests would not run the source as it stands."""
    stale = []
    for ext in [*root.glob("protocol/**/*.so"), *root.glob("spark/*.so")]:
        for suffix in (".py", ".c"):  # mypyc's source, or a C extension's (setup.py)
            source = ext.with_name(ext.name.split(".", 1)[0] + suffix)
            if source.exists() and source.stat().st_mtime > ext.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return sorted(stale)


def pytest_configure(config: pytest.Config) -> None:
    from protocol import _sources

    if not _sources.enabled():
        stale = _stale_extensions(Path(__file__).resolve().parent.parent)
        if stale:
            raise pytest.UsageError(
                f"compiled modules older than their source: {', '.join(stale)}; rebuild "
                "them (make build) or test the sources alone (LMQ_NO_EXTENSIONS=1)")


def pytest_report_header(config: pytest.Config) -> str:
    from protocol import _sources
    from protocol.mqtt import codec

    if _sources.enabled():
        return "compiled modules: off (LMQ_NO_EXTENSIONS=1, the Python sources)"
    compiled = not codec.__file__.endswith(".py") if codec.__file__ else False
    return f"compiled modules: {'on' if compiled else 'not built (the Python sources)'}"


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (the Makefile's ``make test``): a
    module's tests run on one worker, so a module fixture (a crash loop's figures, a
    RabbitMQ broker) is built once; every Spark test runs on one worker, so one JVM
    serves them one after another instead of several competing for two cores."""
    for item in items:
        group = "spark" if item.get_closest_marker("spark") else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def spark_session():
    if not _java_available():
        pytest.fail("no Java runtime: the Spark tests need Java 17+ (make system-deps installs it)")
    from pyspark.sql import SparkSession

    # Python workers must be this interpreter (broker_core's dependencies live here);
    # pyspark reads the variable, not spark.pyspark.python, when it starts them locally.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lmq-spark-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class Written:
    """One record as the test wrote it: the truth the reader is checked against."""

    position: int
    store_ms: int
    message: Message
    lmqs: list[str]
    record_type: RecordType


@dataclass
class SegmentWriter:
    """Writes commit-log segments the way the store lays them out."""

    data_dir: Path
    segment_bytes: int = 1 << 20
    base: int = 0
    records: list[Written] = field(default_factory=list)
    _offsets: dict[str, int] = field(default_factory=dict)
    _segment: Path | None = None
    _used: int = 0

    def __post_init__(self) -> None:
        (self.data_dir / "commitlog").mkdir(parents=True, exist_ok=True)

    def _roll(self, position: int) -> None:
        self._segment = self.data_dir / "commitlog" / f"{position:020d}.log"
        self._segment.touch()
        self._used = 0

    def append(
        self,
        message: Message,
        lmqs: list[str],
        store_ms: int,
        record_type: RecordType = RecordType.MESSAGE,
    ) -> Written:
        position = self.base
        dispatch = []
        for name in lmqs:
            offset = self._offsets.get(name, 0)
            if record_type is RecordType.MESSAGE:
                self._offsets[name] = offset + 1
            dispatch.append((name.encode(), offset))
        raw = encode_record(
            position=position,
            store_ms=store_ms,
            message=message,
            dispatch=dispatch,
            record_type=record_type,
        )
        if self._segment is None or self._used + len(raw) > self.segment_bytes:
            self._roll(position)
        assert self._segment is not None
        with open(self._segment, "ab") as fh:
            fh.write(raw)
        self._used += len(raw)
        self.base += len(raw)
        written = Written(position, store_ms, message, list(lmqs), record_type)
        self.records.append(written)
        return written

    def segments(self) -> list[Path]:
        return sorted((self.data_dir / "commitlog").glob("*.log"))

    def messages(self) -> list[Written]:
        return [w for w in self.records if w.record_type is RecordType.MESSAGE]


@pytest.fixture
def segment_writer(tmp_path):
    def make(segment_bytes: int = 1 << 20, subdir: str = "data") -> SegmentWriter:
        return SegmentWriter(tmp_path / subdir, segment_bytes=segment_bytes)

    return make
