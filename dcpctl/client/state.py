"""The ``--state`` file: where each vbucket's stream got to, written atomically.

Format (JSON, documented in dcpctl-stream(1)):
``{"version": 1, "bucket": B, "vbuckets": {"<vb>": {"vbucket_uuid", "seqno", "snap_start_seqno",
"snap_end_seqno", "failover_log": [{"vbucket_uuid", "seqno"}, ...], "purge_seqno"}}}``. ``seqno`` is the last
item delivered to the output, so a resume asks from it and every item arrives exactly once. ``purge_seqno``,
there once a v2.2 marker gave one, is the server's purge seqno as the stream last saw it: a resume sends it
back, so that a start below it is no reason to roll back to 0 while the server has purged nothing since
(reference 9). A file without it (an older dcpctl's) reads as before, and an older dcpctl ignores it. Writes go to a
temporary file in the same directory, are flushed and fsynced, then renamed over the old file: a crash
leaves the old state or the new one, never half of either. A symlink is written through: the temporary
file goes in its target's directory and replaces the target, the link kept. A file that cannot be read or
written is a :class:`StateError` naming it, never an ``OSError`` (which the caller could take for the
network's).

A kill -9 between the temporary file and the rename leaves the temporary file. So they do not pile up, a
save holds a lock for its state file (``lockf`` on ``.FILE.lock`` beside it, by every dcpctl saving there)
from before its temporary file is made until it is renamed, and the first save of a run removes, under the
lock, the files of FILE's temporary-file pattern: no other save can be writing one then. The lock file is
removed by its holder as the save ends (a waiter that then holds a removed file tries again), so a finished
save leaves nothing beside the state file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from dcpctl.dcp.rollback import FailoverEntry
from dcpctl.errortext import file_error, json_error
from dcpctl.protocol.constants import MAX_VBUCKETS
from dcpctl.safetext import brief

VERSION: Final = 1
# The name tempfile.mkstemp gives a save's temporary file after its prefix ``.FILE.``: 8 characters of
# [a-z0-9_] (CPython's tempfile._RandomNameSequence), the pattern stale ones are known by.
_TEMPORARY_SUFFIX: Final = "[a-z0-9_]{8}"
U64: Final = (1 << 64) - 1  # seqnos and uuids are u64 on the wire: anything else cannot be asked for


class StateError(ValueError):
    """A state file that cannot be used (one line, names the file)."""


@dataclass
class VbucketPosition:
    vbucket_uuid: int = 0
    seqno: int = 0
    snap_start_seqno: int = 0
    snap_end_seqno: int = 0
    failover_log: list[FailoverEntry] = field(default_factory=list)
    purge_seqno: int | None = None  # of the last v2.2 marker the stream had (see the module docstring)

    def to_json(self) -> dict[str, Any]:
        out = {"vbucket_uuid": self.vbucket_uuid, "seqno": self.seqno, "snap_start_seqno": self.snap_start_seqno,
               "snap_end_seqno": self.snap_end_seqno, "failover_log": [e.to_json() for e in self.failover_log]}
        if self.purge_seqno is not None:
            out["purge_seqno"] = self.purge_seqno
        return out

    def resume_snapshot(self) -> tuple[int, int]:
        """The snapshot to ask with: the current one if the seqno is inside it, else (seqno, seqno)."""
        if self.snap_start_seqno <= self.seqno < self.snap_end_seqno:
            return self.snap_start_seqno, self.snap_end_seqno
        return self.seqno, self.seqno

    def rolled_back(self, seqno: int) -> None:
        """What a correct client keeps after a rollback to ``seqno`` (reference 9.4)."""
        self.failover_log = [e for e in self.failover_log if e.seqno <= seqno]
        self.vbucket_uuid = self.failover_log[0].vbucket_uuid if self.failover_log else 0
        self.seqno = self.snap_start_seqno = self.snap_end_seqno = min(seqno, self.seqno)


@dataclass
class State:
    bucket: str
    vbuckets: dict[int, VbucketPosition] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "bucket": self.bucket,
                "vbuckets": {str(vb): pos.to_json() for vb, pos in sorted(self.vbuckets.items())}}


def _u64(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= U64:
        # orjson reads an integer past 64 bits as a float: said as a whole number, not in exponent form
        shown_as = f"{value:.0f}" if isinstance(value, float) and value.is_integer() else brief(value)
        raise ValueError(f"{shown_as} is not a whole number from 0 to 2^64-1")
    return value


def _vbucket(name: Any) -> int:
    # the length first: int() refuses a string of over 4,300 digits with Python's own message
    if not (isinstance(name, str) and name.isascii() and name.isdigit()) or len(name.lstrip("0")) > 4 \
            or int(name) >= MAX_VBUCKETS:
        raise ValueError(f"vbucket {brief(name)} is not a vbucket number (0 to {MAX_VBUCKETS - 1})")
    return int(name)


def _why(exc: Exception) -> str:
    """What is wrong with a state file's structure, in words rather than a Python exception's repr."""
    if isinstance(exc, KeyError):
        return f"no {brief(exc.args[0])} field where one is needed"
    if isinstance(exc, TypeError | AttributeError):
        return "a field holds another kind of value than a state file has there"
    return str(exc)


def load(path: Path, bucket: str) -> State:
    try:
        data = orjson.loads(path.read_bytes())  # depth-bounded: a hand-edited file cannot recurse dcpctl away
    except FileNotFoundError:
        return State(bucket)
    except OSError as exc:
        raise StateError(file_error(str(path), exc)) from None
    except ValueError as exc:
        raise StateError(json_error(f"{path} (a dcpctl state file)", exc)) from None
    try:
        if data.get("version") != VERSION:
            raise StateError(f"{path}: state file version {data.get('version')!r}, expected {VERSION}")
        if data.get("bucket") != bucket:
            raise StateError(f"{path}: the state is for bucket {data.get('bucket')!r}, not {bucket!r}")
        state = State(bucket)
        for vb, pos in data["vbuckets"].items():
            state.vbuckets[_vbucket(vb)] = VbucketPosition(
                _u64(pos["vbucket_uuid"]), _u64(pos["seqno"]), _u64(pos["snap_start_seqno"]),
                _u64(pos["snap_end_seqno"]),
                [FailoverEntry(_u64(e["vbucket_uuid"]), _u64(e["seqno"])) for e in pos.get("failover_log", [])],
                _u64(pos["purge_seqno"]) if pos.get("purge_seqno") is not None else None)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, StateError):
            raise
        raise StateError(f"{path}: not a dcpctl state file ({_why(exc)})") from None
    return state


def _target(path: Path) -> Path:
    """Where a save writes: a symlink's target, resolved once per save, so the rename replaces the target (on
    the link's path it would make the link a regular file and leave the target stale) from its own file system."""
    return Path(os.path.realpath(path))


def check_writable(path: Path) -> None:
    """That the state can be saved where asked, found before connecting: a file is made in its directory
    (as every save does) and removed."""
    target = _target(path)
    directory = target.parent
    if not directory.is_dir():
        raise StateError(f"{path}: no such directory to save it in")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    except OSError as exc:
        raise StateError(f"{path}: cannot save the state in {directory}: {exc.strerror}") from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def save(path: Path, state: State, *, tidy: bool = False) -> None:
    """Write atomically: temporary file, fsync, rename (and fsync the directory). A failure (a full or
    read-only disk) leaves the file as it was and is a :class:`StateError` naming it. ``tidy``: first remove
    the temporary files killed saves left (see the module docstring)."""
    target = _target(path)
    data = orjson.dumps(state.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    try:
        with _save_lock(target) as locked:
            if tidy and locked:
                _remove_stale(target)
            _save(target, target.parent, data)
    except OSError as exc:
        raise StateError(f"{path}: cannot save the state: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _save_lock(path: Path) -> Iterator[bool]:
    """Hold the lock of ``path``'s saves (``.NAME.lock`` beside it); yields whether it is held: a file system
    without locks saves as before, unlocked, and nothing is removed there."""
    lock = path.with_name(f".{path.name}.lock")
    fd = _lock(lock)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        try:
            with contextlib.suppress(OSError):
                lock.unlink()  # while held: whoever waits on this file finds it gone and tries again
        finally:
            os.close(fd)


def _lock(lock: Path) -> int | None:
    """The descriptor of ``lock``, locked, once it is the file at that path; None where locking fails (ENOLCK:
    a network file system without a lock manager). POSIX locks (lockf) rather than flock: they belong to the
    process, so a descriptor a signal leaked (stop at once) never locks dcpctl out of its own final save."""
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                return None
            try:
                if os.path.samestat(os.fstat(fd), os.stat(lock)):
                    return fd
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it as it finished: the lock is the file there now


def _remove_stale(path: Path) -> None:
    """Remove the temporary files of ``path``'s saves: regular files named by its pattern, readable by their
    owner alone as mkstemp makes them (a file of the user's that happens to match the name is kept). Called
    under the save lock, when no save can be writing one; one that cannot be removed stays, the save goes on."""
    pattern = re.compile(re.escape(f".{path.name}.") + _TEMPORARY_SUFFIX)
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False) \
                    and entry.stat(follow_symlinks=False).st_mode & 0o077 == 0:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _save(path: Path, directory: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)  # a BufferedWriter: written whole or an OSError
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
