"""Scenario files for ``dcpctl serve``: what happens to the emulated cluster, and when.

A scenario is a TOML file with one ``[[event]]`` table per event, applied in file order once its trigger
holds. Triggers: ``after_items`` (items the server has sent, all connections together), ``after_seconds``
(since the server started); an event without a trigger applies at start. Actions:

- ``failover`` (``vbucket``, optional ``seqno``): a replica is promoted at ``seqno`` (default: the high
  seqno): a new failover-log entry, items above it lost; streams of the vbucket end (StateChanged).
- ``purge`` (``vbucket``, ``seqno``): tombstones up to ``seqno`` are purged (a lower start rolls back to 0).
- ``history_loss`` (``vbucket``): as an ephemeral bucket that lost its history: the purge seqno becomes the
  high seqno.
- ``move`` (``vbucket``, ``node``): the active copy moves to another node (rebalance): streams there end
  (StateChanged), the cluster map's revision goes up, and the old node answers NotMyVbucket.
- ``disconnect``: every client connection is dropped (a node restart, a network cut).
- ``delay`` (``seconds``): no stream data for that long (a slow disk, a stalled backfill).
- ``mutate`` (``count``, optional ``vbucket``): that many new items at once.
- ``hang`` (optional ``seconds``, default forever): stream requests received meanwhile are never answered,
  while noops and the streams already open go on (a node whose backfill never starts): what a consumer's
  own deadline on stream requests is for.
- ``manifest`` (``file``: a collections manifest, as ``--collections`` takes it, its path relative to the
  scenario's): ns_server pushes a new manifest: every vbucket queues the system events of the change
  (collections dropped, created and modified, scopes created and dropped), and the cluster map's revision
  goes up. Its uid must go up, and a kept collection or scope keeps its name (and a collection its scope).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dcpctl.errortext import file_error
from dcpctl.producer import manifestfile
from dcpctl.producer.store import Manifest, event_cost, manifest_changes

ACTIONS: Final = {"failover": ("vbucket",), "purge": ("vbucket", "seqno"), "history_loss": ("vbucket",),
                  "move": ("vbucket", "node"), "disconnect": (), "delay": ("seconds",), "mutate": ("count",),
                  "hang": (), "manifest": ("file",)}
OPTIONAL: Final = {"failover": ("seqno",), "mutate": ("vbucket",), "hang": ("seconds",)}
TRIGGERS: Final = ("after_items", "after_seconds")
_SECONDS: Final = frozenset({"after_seconds", "seconds"})  # the keys that may be fractional


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the event and the problem."""


@dataclass(frozen=True)
class Event:
    action: str
    after_items: int | None = None
    after_seconds: float | None = None
    vbucket: int | None = None
    seqno: int | None = None
    node: int | None = None
    seconds: float = 0.0
    count: int = 0
    file: str | None = None  # a manifest event's file, as the scenario names it
    manifest: Manifest | None = None  # and what it holds, once read

    def due(self, items_sent: int, elapsed: float) -> bool:
        if self.after_items is not None and items_sent < self.after_items:
            return False
        return self.after_seconds is None or elapsed >= self.after_seconds


def load(path: Path) -> list[Event]:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ScenarioError(file_error(str(path), exc)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: not TOML: {exc}") from None
    except RecursionError:  # tomllib has no depth limit of its own: Python's recursion limit is the bound
        raise ScenarioError(f"{path}: not a scenario: arrays or tables nested too deeply") from None
    events = parse(data, str(path))
    for number, event in enumerate(events, 1):
        if event.file is not None:
            try:
                manifest = manifestfile.read(path.parent / event.file)
            except manifestfile.ManifestError as exc:
                raise ScenarioError(f"{path}: event {number} (manifest): {exc}") from None
            events[number - 1] = dataclasses.replace(event, manifest=manifest)
    return events


def parse(data: dict[str, Any], where: str = "scenario") -> list[Event]:
    unknown = set(data) - {"event"}
    if unknown:
        raise ScenarioError(f"{where}: unknown top-level key {sorted(unknown)[0]!r} (events are [[event]] tables)")
    events = []
    if not isinstance(data.get("event", []), list):
        raise ScenarioError(f"{where}: event must be an array of tables ([[event]])")
    for number, raw in enumerate(data.get("event", []), 1):
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: event {number} is not a table")
        action = raw.get("action")
        if action not in ACTIONS:
            raise ScenarioError(f"{where}: event {number}: action must be one of {', '.join(ACTIONS)}")
        allowed = {"action", *TRIGGERS, *ACTIONS[action], *OPTIONAL.get(action, ())}
        extra = set(raw) - allowed
        if extra:
            raise ScenarioError(f"{where}: event {number} ({action}): unexpected key {sorted(extra)[0]!r}")
        missing = [k for k in ACTIONS[action] if k not in raw]
        if missing:
            raise ScenarioError(f"{where}: event {number} ({action}): {missing[0]} is required")
        for key, value in raw.items():
            if key == "action":
                continue
            if key == "file":
                if not isinstance(value, str) or not value:
                    raise ScenarioError(f"{where}: event {number} ({action}): file must be a file name")
                continue
            wanted = float if key in _SECONDS else int
            if isinstance(value, bool) or not isinstance(value, wanted | int) or not 0 <= value < math.inf:
                kind = "a number" if wanted is float else "an integer"
                raise ScenarioError(f"{where}: event {number} ({action}): {key} must be {kind} >= 0")
        events.append(Event(action, _int(raw, "after_items"), _num(raw, "after_seconds"), _int(raw, "vbucket"),
                            _int(raw, "seqno"), _int(raw, "node"),
                            _seconds(raw, action),
                            _int(raw, "count") or 0, raw.get("file")))
    return events


def check(events: list[Event], vbuckets: int, nodes: int, where: str = "scenario",
          manifest: Manifest | None = None, memory_quota: int | None = None) -> None:
    """Refuse events naming a vbucket the bucket does not have or a node the cluster does not have, and
    manifests that cannot follow the one before them (the bucket's first, ``manifest``, then each in turn) or
    whose events, kept in every vbucket as writes are, would pass ``memory_quota`` (--memory-quota)."""
    current, dropped, kept = manifest or Manifest(), set[int](), 0
    for number, event in enumerate(events, 1):
        if event.manifest is not None:
            refused = current.change_refusal(event.manifest, dropped)
            if refused is not None:
                raise ScenarioError(f"{where}: event {number} (manifest): {event.file}: {refused}")
            kept += vbuckets * sum(map(event_cost, manifest_changes(current, event.manifest)))
            if memory_quota is not None and kept > memory_quota:
                raise ScenarioError(f"{where}: event {number} (manifest): {event.file}: its events in {vbuckets} "
                                    f"vbuckets would keep {kept} bytes, above --memory-quota {memory_quota}")
            dropped |= set(current.collections) - set(event.manifest.collections)
            current = event.manifest
        if event.vbucket is not None and event.vbucket >= vbuckets:
            raise ScenarioError(f"{where}: event {number} ({event.action}): vbucket {event.vbucket} does not exist "
                                f"(the bucket has {vbuckets}, --vbuckets)")
        if event.node is not None and event.node >= nodes:
            raise ScenarioError(f"{where}: event {number} ({event.action}): node {event.node} does not exist "
                                f"(the cluster has {nodes}, --nodes)")


def _seconds(raw: dict[str, Any], action: str) -> float:
    if "seconds" in raw:
        return float(raw["seconds"])
    return float("inf") if action == "hang" else 0.0  # a hang without seconds lasts


def _int(raw: dict[str, Any], key: str) -> int | None:
    return int(raw[key]) if key in raw else None


def _num(raw: dict[str, Any], key: str) -> float | None:
    return float(raw[key]) if key in raw else None
