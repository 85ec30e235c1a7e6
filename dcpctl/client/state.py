"""The ``--state`` file: where each vbucket's stream got to, written atomically.

Format (JSON, documented in dcpctl-stream(1)):
``{"version": 1, "bucket": B, "vbuckets": {"<vb>": {"vbucket_uuid", "seqno", "snap_start_seqno",
"snap_end_seqno", "failover_log": [{"vbucket_uuid", "seqno"}, ...]}}}``. ``seqno`` is the last item
delivered to the output, so a resume asks from it and every item arrives exactly once. Writes go to a
temporary file in the same directory, are flushed and fsynced, then renamed over the old file: a crash
leaves the old state or the new one, never half of either.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dcpctl.dcp.rollback import FailoverEntry

VERSION: Final = 1


class StateError(ValueError):
    """A state file that cannot be used (one line, names the file)."""


@dataclass
class VbucketPosition:
    vbucket_uuid: int = 0
    seqno: int = 0
    snap_start_seqno: int = 0
    snap_end_seqno: int = 0
    failover_log: list[FailoverEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"vbucket_uuid": self.vbucket_uuid, "seqno": self.seqno, "snap_start_seqno": self.snap_start_seqno,
                "snap_end_seqno": self.snap_end_seqno, "failover_log": [e.to_json() for e in self.failover_log]}

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


def load(path: Path, bucket: str) -> State:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return State(bucket)
    except OSError as exc:
        raise StateError(f"{path}: {exc.strerror}") from None
    except ValueError as exc:
        raise StateError(f"{path}: not a dcpctl state file ({exc})") from None
    try:
        if data.get("version") != VERSION:
            raise StateError(f"{path}: state file version {data.get('version')!r}, expected {VERSION}")
        if data.get("bucket") != bucket:
            raise StateError(f"{path}: the state is for bucket {data.get('bucket')!r}, not {bucket!r}")
        state = State(bucket)
        for vb, pos in data["vbuckets"].items():
            state.vbuckets[int(vb)] = VbucketPosition(
                int(pos["vbucket_uuid"]), int(pos["seqno"]), int(pos["snap_start_seqno"]), int(pos["snap_end_seqno"]),
                [FailoverEntry(int(e["vbucket_uuid"]), int(e["seqno"])) for e in pos.get("failover_log", [])])
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        if isinstance(exc, StateError):
            raise
        raise StateError(f"{path}: not a dcpctl state file ({exc!r})") from None
    return state


def save(path: Path, state: State) -> None:
    """Write atomically: temporary file, fsync, rename (and fsync the directory)."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(state.to_json(), out, indent=1)
            out.write("\n")
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
