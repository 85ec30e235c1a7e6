"""The class-data archive Spark's driver JVM starts from: which archive a run uses or writes, how a written
one is put in place (never half-written), and, with a real JVM, that a second analyze maps it and that an
archive the JVM cannot use changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from capturekit import ROOT

from dcpctl.pipeline import jvmcache

SAMPLE = ROOT / "samples" / "dcp-session.pcap"
SPARK = "4.3.0\0/somewhere/pyspark\0"


def environ(tmp_path: Path, **more: str) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": os.environ.get("PATH", ""), **more}


def java_or_skip() -> str:
    java = jvmcache.java_executable(os.environ)
    if java is None:
        if os.environ.get("CI"):
            pytest.fail("no Java runtime: .ci/run installs one")
        pytest.skip("no Java runtime")
    return java


def test_turned_off_or_placed_by_xdg(tmp_path: Path) -> None:
    for off in ("off", "0", "no", "FALSE", " Off "):
        assert jvmcache.cache_directory({"DCPCTL_JVM_CACHE": off}) is None
        assert jvmcache.prepare(environ(tmp_path, DCPCTL_JVM_CACHE=off), SPARK) == jvmcache.ClassArchive()
    assert jvmcache.cache_directory({"XDG_CACHE_HOME": "/x/y"}) == Path("/x/y/dcpctl")
    assert jvmcache.cache_directory({"DCPCTL_JVM_CACHE": "on"}) == Path("~/.cache/dcpctl").expanduser()


def test_the_first_run_writes_under_a_temporary_name(tmp_path: Path) -> None:
    java_or_skip()
    archive = jvmcache.prepare(environ(tmp_path), SPARK)
    assert archive.writing is not None
    assert archive.directory == tmp_path / "cache" / "dcpctl"
    assert archive.writing.parent == archive.directory
    assert archive.writing.name == f".spark-classes-{archive.digest}.{os.getpid()}.jsa"
    assert archive.options.split() == [f"-XX:ArchiveClassesAtExit={archive.writing}", "-Xlog:cds*=off"]
    assert not archive.writing.exists()


def test_a_complete_archive_is_used_and_a_truncated_one_is_not(tmp_path: Path) -> None:
    java = java_or_skip()
    directory = tmp_path / "cache" / "dcpctl"
    directory.mkdir(parents=True)
    key = jvmcache.digest(java, SPARK)
    truncated = directory / f"spark-classes-{key}-1000.jsa"
    truncated.write_bytes(b"x" * 999)
    assert jvmcache.prepare(environ(tmp_path), SPARK).writing is not None
    complete = directory / f"spark-classes-{key}-1000.jsa"
    complete.write_bytes(b"x" * 1000)
    assert jvmcache.prepare(environ(tmp_path), SPARK) == jvmcache.ClassArchive(
        f"-XX:SharedArchiveFile={complete} -Xlog:cds*=off")
    other_spark = jvmcache.prepare(environ(tmp_path), "4.4.0\0/elsewhere\0")
    assert other_spark.writing is not None
    assert other_spark.digest != key


def test_a_damaged_archive_is_found_by_java_version_and_replaced(tmp_path: Path) -> None:
    """A truncated archive crashes the JVM that maps it (SIGBUS): ``java -version`` takes the crash, the
    archive is deleted, and the run writes a new one."""
    java = java_or_skip()
    directory = tmp_path / "cache" / "dcpctl"
    directory.mkdir(parents=True)
    made = tmp_path / "made.jsa"  # a real archive, of what java -version loads
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={made}", "-Xlog:cds*=off", "-version"], capture_output=True,
                   check=True, timeout=120)
    assert jvmcache.usable(java, made)
    half = made.read_bytes()[:made.stat().st_size // 2]
    damaged = directory / f"spark-classes-{jvmcache.digest(java, SPARK)}-{len(half)}.jsa"
    damaged.write_bytes(half)
    assert not jvmcache.usable(java, damaged)
    archive = jvmcache.prepare(environ(tmp_path), SPARK)
    assert archive.writing is not None
    assert not damaged.exists()
    assert not list(Path.cwd().glob("hs_err_pid*.log"))


def test_abandoned_temporary_archives_are_removed(tmp_path: Path) -> None:
    java_or_skip()
    directory = tmp_path / "cache" / "dcpctl"
    directory.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead = directory / f".spark-classes-0123456789abcdef.{int(gone.stdout)}.jsa"
    running = directory / f".spark-classes-0123456789abcdef.{os.getpid()}.jsa"
    dead.write_bytes(b"half")
    running.write_bytes(b"half")
    jvmcache.prepare(environ(tmp_path), SPARK)
    assert not dead.exists()
    assert running.exists()


class Gateway:
    """What ``finish`` is handed: py4j's gateway, with the process pyspark started as ``proc``."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.proc = process
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


def jvm_like(writing: Path, code: int = 0) -> subprocess.Popen[bytes]:
    """A process that behaves as the gateway JVM does: runs until its standard input ends, then writes the
    archive and exits."""
    script = f"import sys; sys.stdin.read(); open({str(writing)!r}, 'wb').write(b'classes' * 100); sys.exit({code})"
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_a_written_archive_is_renamed_into_place_with_its_size(tmp_path: Path) -> None:
    java_or_skip()
    archive = jvmcache.prepare(environ(tmp_path), SPARK)
    assert archive.writing is not None
    assert archive.directory is not None
    stale = archive.directory / "spark-classes-0123456789abcdef-5.jsa"  # another Java's or Spark's
    stale.write_bytes(b"12345")
    gateway = Gateway(jvm_like(archive.writing))
    final = archive.finish(gateway)
    assert gateway.shut
    assert final == archive.directory / f"spark-classes-{archive.digest}-700.jsa"
    assert final.read_bytes() == b"classes" * 100
    assert sorted(p.name for p in archive.directory.iterdir()) == [final.name]
    assert jvmcache.prepare(environ(tmp_path), SPARK).options.startswith(f"-XX:SharedArchiveFile={final} ")


def test_a_failed_or_abandoned_run_saves_nothing(tmp_path: Path) -> None:
    java_or_skip()
    archive = jvmcache.prepare(environ(tmp_path), SPARK)
    assert archive.writing is not None
    assert archive.directory is not None
    assert archive.finish(Gateway(jvm_like(archive.writing, code=1))) is None
    process = jvm_like(archive.writing)
    assert archive.finish(Gateway(process), save=False) is None
    assert process.returncode is not None  # killed, not left to write an archive nobody will rename
    assert list(archive.directory.iterdir()) == []


def analyze(tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "DCPCTL_JVM_CACHE"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return subprocess.Popen([sys.executable, "-m", "dcpctl", "analyze", str(SAMPLE), "--out", str(tmp_path / name),
                             "--master", "local[1]", "-F", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)


def finished(process: subprocess.Popen[bytes]) -> tuple[dict[str, object], list[str]]:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err.decode()[-2000:]
    report = json.loads(out)
    report.pop("dataset")
    return report, [line for line in err.decode().splitlines() if "incubator modules" not in line]


def mapped_by_a_jvm(process: subprocess.Popen[bytes], archive: Path) -> bool:
    """Whether, while ``process`` runs, some java process maps ``archive``."""
    seen = False
    while process.poll() is None and not seen:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                seen = seen or (b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()
                                and str(archive) in Path(f"/proc/{pid}/maps").read_text())
            except OSError:
                continue
        time.sleep(0.05)
    return seen


@pytest.mark.usefixtures("spark_module")
def test_analyze_saves_the_archive_once_then_starts_from_it(tmp_path: Path) -> None:
    java_or_skip()
    first, notices = finished(analyze(tmp_path, "one"))
    directory = tmp_path / "cache" / "dcpctl"
    assert notices == [f"dcpctl: saving Spark's JVM classes in {directory} for faster starts (once; "
                       "DCPCTL_JVM_CACHE=off turns this off)"]
    [saved] = directory.iterdir()
    assert saved.name.startswith("spark-classes-")
    assert saved.stat().st_size > 10_000_000
    assert saved.name == f"spark-classes-{saved.name.split('-')[2]}-{saved.stat().st_size}.jsa"

    second = analyze(tmp_path, "two")
    assert mapped_by_a_jvm(second, saved)
    assert finished(second) == (first, [])
    assert list(directory.iterdir()) == [saved]

    saved.chmod(0o600)
    saved.write_bytes(os.urandom(saved.stat().st_size))  # an archive the JVM cannot use, of the right size
    assert finished(analyze(tmp_path, "three")) == (first, [])


def test_copy_lines_drops_exactly_the_incubator_notice() -> None:
    """A real process's standard error through copy_lines: the notice goes, every other line stays, in
    order, a last line without its newline included."""
    read, write = os.pipe()
    out_read, out_write = os.pipe()
    lines = (b"WARNING: Using incubator modules: jdk.incubator.vector\n"
             b"spark: ERROR SparkContext: a real error\n"
             b"WARNING: Using incubator modules: jdk.incubator.vector and more\n"
             b"Exception in thread main")
    child = subprocess.Popen(["/bin/sh", "-c", 'printf "%s" "$1" >&2', "sh", lines.decode()],
                             stderr=write)
    os.close(write)
    jvmcache.copy_lines(read, out_write)
    os.close(out_write)
    assert child.wait(30) == 0
    with os.fdopen(out_read, "rb") as copied:
        assert copied.read() == lines.split(b"\n", 1)[1]


def test_analyze_says_nothing_of_incubator_modules_but_the_jvms_own_lines_remain(tmp_path: Path) -> None:
    """Issue 18: every run printed the JVM's incubator notice. The JVM's other lines still reach standard
    error (here, the one it prints for JAVA_TOOL_OPTIONS)."""
    java_or_skip()
    env = {**os.environ, "DCPCTL_JVM_CACHE": "off", "JAVA_TOOL_OPTIONS": "-Ddcpctl.test=1"}
    done = subprocess.run([sys.executable, "-m", "dcpctl", "analyze", str(SAMPLE), "--out", str(tmp_path / "ds"),
                           "--master", "local[1]", "-F", "json"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "incubator" not in done.stderr
    assert "Picked up JAVA_TOOL_OPTIONS: -Ddcpctl.test=1" in done.stderr.splitlines()
    assert json.loads(done.stdout)["messages"] == 22


def test_what_the_jvm_writes_on_standard_output_goes_to_standard_error(tmp_path: Path) -> None:
    """The JVM writes its unified log (every warning, by default) on standard output, which is analyze's
    report: a driver JVM started with ``-Xlog:gc``, as a user tuning Spark's memory may, used to put its
    lines before the JSON. They now reach standard error, and the report stays one JSON document."""
    java = java_or_skip()
    home = tmp_path / "java"
    (home / "bin").mkdir(parents=True)
    # the driver JVM logs its collector; Spark's launcher (launcher.Main, whose arguments name SparkSubmit
    # too) does not: spark-class would echo its lines itself
    wrapper = home / "bin" / "java"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *org.apache.spark.launcher.Main*) exec {java} "$@";;\n'
                       f'*org.apache.spark.deploy.SparkSubmit*) exec {java} -Xlog:gc "$@";;\nesac\n'
                       f'exec {java} "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "DCPCTL_JVM_CACHE": "off", "JAVA_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "dcpctl", "analyze", str(SAMPLE), "--out", str(tmp_path / "ds"),
                           "--master", "local[1]", "-F", "json"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["messages"] == 22
    assert any("[info][gc] Using " in line for line in done.stderr.splitlines()), done.stderr[-2000:]

