"""``lmq analyze``: Spark analytics over the commit log.

Thin: the work is :func:`spark.job.run`. pyspark is imported inside the command, so
``lmq --help`` does not pay for it. The environment (Java lookup, Spark session) is an
:class:`AnalyzeEnv` in ``ctx.obj`` that tests replace.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import click


def find_java() -> str | None:
    """The java executable Spark will start: ``$JAVA_HOME/bin/java``, else ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


@contextmanager
def local_session(master: str) -> Iterator[object]:
    from spark.job import build_session

    session = build_session(master)
    try:
        yield session
    finally:
        session.stop()


@dataclass
class AnalyzeEnv:
    find_java: Callable[[], str | None] = find_java
    #: master URL -> context manager yielding a SparkSession
    session: Callable[[str], AbstractContextManager] = local_session


class AnalyzeError(click.ClickException):
    """A one-line failure of an analysis (no traceback for the user)."""


@click.group()
def analyze() -> None:
    """Spark analytics over the commit log (needs the `spark` extra and Java 17+)."""


@analyze.command("fanout")
@click.option(
    "--data-dir",
    required=True,
    help="Gateway data directory (or its commitlog/), a local path or any Hadoop URI.",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Output directory: summary.md/json, charts/, tables/ (Parquet).",
)
@click.option("--since", help="Only records stored at or after T (ISO 8601, or epoch ms).")
@click.option("--until", help="Only records stored before T (ISO 8601, or epoch ms).")
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master URL: local[N], spark://host:7077, yarn, k8s://...",
)
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--include-sys",
    is_flag=True,
    help="Count the gateway's own $SYS/... statistics messages too (left out by default).",
)
@click.pass_context
def fanout(
    ctx: click.Context,
    data_dir: str,
    out_dir: str,
    since: str | None,
    until: str | None,
    master: str,
    top: int,
    include_sys: bool,
) -> None:
    """Device fan-out: who publishes, to how many LMQs, on which topics, over time."""
    env = ctx.find_object(AnalyzeEnv) or AnalyzeEnv()
    try:
        from spark.job import JobConfig, parse_time, quiet_pyspark_warnings, run
        from spark.reader import NoSegments, list_segments
    except ImportError as exc:
        raise AnalyzeError(
            f"{exc.name or 'pyspark'} is not installed: pip install 'lmq-gateway[spark]'"
        ) from None
    try:
        since_t = parse_time(since) if since else None
        until_t = parse_time(until) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if since_t and until_t and until_t <= since_t:
        raise click.BadParameter("--until must be later than --since")

    if env.find_java() is None:
        raise AnalyzeError(
            "Java not found: Spark needs a Java 17+ runtime; install one or set JAVA_HOME"
        )
    if _local(data_dir):
        # fail before starting a JVM when the answer is already known
        try:
            list_segments(data_dir)
        except (NoSegments, FileNotFoundError) as exc:
            raise AnalyzeError(str(exc)) from None

    quiet_pyspark_warnings()
    config = JobConfig(
        data_dir, out_dir, since=since_t, until=until_t, top=top, include_sys=include_sys
    )

    def progress(message: str) -> None:
        click.echo(f"[analyze] {message}", err=True)

    progress(f"starting Spark ({master})")
    try:
        with env.session(master) as session:
            result = run(session, config, progress=progress)
    except (NoSegments, FileNotFoundError) as exc:
        raise AnalyzeError(str(exc)) from None
    except Exception as exc:  # Py4J/Spark errors: first line only, the rest is JVM noise
        if isinstance(exc, click.ClickException):
            raise
        raise AnalyzeError(f"the Spark job failed: {_one_line(exc)}") from exc

    tail = result.summary["log"]["tail_bytes"]
    if tail:
        progress(f"last segment ends in {tail} bytes of an incomplete write (not read)")
    if result.skipped_bytes:
        p = result.problems[0]
        raise AnalyzeError(
            f"corrupt commit log: skipped {result.skipped_bytes} bytes in "
            f"{len(result.problems)} place(s), first {p['bytes']} bytes at position "
            f"{p['position']} in {p['segment']} ({p['reason']}); figures exclude them; "
            f"summary: {result.summary_md}"
        )
    click.echo(str(result.summary_md))


def _one_line(exc: BaseException) -> str:
    """First line of an error and, when it only says that something below failed, its
    last line (the cause); JVM stack frames are left out."""
    lines = [
        ln.strip()
        for ln in str(exc).splitlines()
        if ln.strip() and not ln.strip().startswith("at ")
    ]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 400 else text[:397] + "..."


def _local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file:")
