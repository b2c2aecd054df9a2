"""SparkSession set-up shared by the sweep and the audit.

Local masters are bound to 127.0.0.1 (no traffic off the machine, and no
hostname warnings); the Python workers run the driver's own interpreter so
the installed ``zabd`` is the one they import. On a real cluster the
``zabd`` package is shipped as a zip (``addPyFile``) unless the executors
already have it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, TextIO


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def get_session(master: str | None = None, app_name: str = "zabd-pipeline", quiet: bool = True) -> Any:
    """Get (or reuse) a SparkSession. ``master`` None: an existing session, else local[*]."""
    # PySpark warns about pandas >= 3 on import; the pipeline uses pandas only through Arrow.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"pyspark\..*")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    master = master or "local[*]"
    builder = SparkSession.builder.master(master).appName(app_name)
    builder = builder.config("spark.ui.showConsoleProgress", "false")  # our own progress line instead
    builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    if quiet:
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{_log4j_file()}")
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        builder = builder.config("spark.ui.enabled", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL" if quiet else "WARN")
    parallelism = spark.sparkContext.defaultParallelism
    # The only shuffles are small group-bys over the Parquet output.
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, min(parallelism, 64))))
    if not is_local(master):
        ship_code(spark)
    return spark


_LOG4J = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j_file() -> str:
    """JVM logging off from its first line on (setLogLevel comes too late for start-up chatter).

    Fatal only: a failed job surfaces as one Python exception, which the CLI turns
    into one line (:func:`describe_error`); the JVM's own stack traces would bury it.
    """
    path = os.path.join(tempfile.gettempdir(), f"zabd-log4j2-fatal-{os.getuid()}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as fh:
            fh.write(_LOG4J)
        os.replace(tmp, path)
    return path


def ship_code(spark: Any) -> None:
    """Zip the ``zabd`` package and add it to the executors' path (stdlib-only modules it needs)."""
    import zabd

    root = Path(zabd.__file__).resolve().parent
    fd, path = tempfile.mkstemp(prefix="zabd-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(root.rglob("*.py")):
            zf.write(file, str(file.relative_to(root.parent)))
    spark.sparkContext.addPyFile(path)


_CAUSE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception)\b[^:]*: .+")


def describe_error(exc: BaseException) -> str:
    """One line for a failed Spark call: the innermost ``SomethingError: message``.

    A Py4J error's text is a Java stack trace that may embed an executor's
    Python traceback; its last ``...Error: message`` line is the cause.
    """
    text = str(exc)
    java = getattr(exc, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):  # the gateway may be gone already
            text = str(java.toString()) + "\n" + text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if _CAUSE.match(line) and not line.startswith("py4j.")]
    line = causes[-1] if causes else (lines[0] if lines else type(exc).__name__)
    return line[:500]


class Progress:
    """A driver-side progress line from Spark's status tracker.

    Tasks run thousands of scenarios each, so progress advances per task:
    ``done/total`` scenarios are estimated as completed tasks x mean task size.
    On a terminal the line is redrawn in place; otherwise a line every 10 s.
    """

    def __init__(self, spark: Any, label: str, total_items: int, unit: str, out: TextIO | None = None) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.label = label
        self.total_items = total_items
        self.unit = unit
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zabd-progress", daemon=True)
        self._start = time.monotonic()

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc_type is None:
            self._print(final=True)
        elif self.tty:  # leave a clean line for the error message
            self.out.write("\r\033[K")
            self.out.flush()

    def _counts(self) -> tuple[int, int]:
        done = total = 0
        for sid in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def _print(self, final: bool = False) -> None:
        elapsed = time.monotonic() - self._start
        if final:
            what = f"{self.total_items:,} {self.unit}" if self.unit else "done"
            line = f"{self.label}: {what} in {elapsed:.1f} s"
        else:
            done, total = self._counts()
            if total == 0:
                return
            if self.unit == "":  # several different stages: tasks are all one can say
                line = f"{self.label}: stage tasks {done}/{total}, {elapsed:.0f} s"
                self._emit(line, final)
                return
            items = self.total_items * done // total
            rate = items / elapsed if elapsed > 0 else 0.0
            eta = f", ~{(self.total_items - items) / rate:.0f} s left" if rate > 0 else ""
            line = (
                f"{self.label}: {done}/{total} tasks, ~{items:,}/{self.total_items:,} {self.unit}, {elapsed:.0f} s{eta}"
            )
        self._emit(line, final)

    def _emit(self, line: str, final: bool) -> None:
        if self.tty:
            self.out.write("\r\033[K" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def _run(self) -> None:
        interval = 0.5 if self.tty else 10.0
        while not self._stop.wait(interval):
            self._print()
