"""``dcpctl failover``: every vbucket's failover log and high seqno, from the node that owns it."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from dcpctl.client.streamer import ACTIVE, served
from dcpctl.commands._live import HostArgument, Login, client_errors
from dcpctl.commands._options import env_of, option_groups, parse_ranges
from dcpctl.dcp.failover import checked_dump, compare, dump_logs
from dcpctl.dcp.rollback import failover_entries, load_json
from dcpctl.errortext import file_error, json_error
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.protocol.constants import Opcode
from dcpctl.render.tables import print_table
from dcpctl.safetext import shown


class FailoverFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


@option_groups
def failover(
    ctx: typer.Context,
    host: HostArgument,
    login: Login = Login(),
    vbuckets: Annotated[list[str] | None, typer.Option("--vbuckets", help="vbuckets: 0-1023,5 (repeatable; "
                                                       "default all).", metavar="RANGES")] = None,
    fmt: Annotated[FailoverFormat | None, typer.Option("--format", "-F", help="table on a terminal, json when "
                                                       "piped.")] = None,
    compare_with: Annotated[Path | None, typer.Option("--compare", help="An earlier --format json dump: name "
                                                      "new entries and divergent histories.", metavar="FILE")] = None,
) -> None:
    """Dump the failover log of every vbucket with its high seqno, each from its active node."""
    env = env_of(ctx)
    earlier = None
    if compare_with is not None:
        try:
            earlier = checked_dump(load_json(compare_with.read_bytes()))
        except OSError as exc:
            raise CommandError(file_error(f"--compare: {compare_with}", exc), ExitCode.INPUT) from None
        except json.JSONDecodeError as exc:  # orjson's, with the position
            raise CommandError(json_error(f"--compare: {compare_with}", exc), ExitCode.INPUT) from None
        except (ValueError, TypeError) as exc:
            raise CommandError(f"--compare: {compare_with}: {exc!s}", ExitCode.INPUT) from None
    chosen = parse_ranges(vbuckets) if vbuckets else None  # a bad range is a usage error before connecting
    password = login.password(env)
    tls_options = login.tls_options()
    rows: list[dict[str, Any]] = []
    with client_errors():
        count, owner = login.cluster_map(host, password, tls_options)
        wanted, unserved = served(sorted(chosen if chosen is not None else range(count)), count, owner)
        if unserved:
            env.stderr.write(f"dcpctl: warning: {shown(unserved)}: not in this dump\n")
        by_node: dict[tuple[str, int], list[int]] = {}
        for vb in wanted:
            by_node.setdefault(owner[vb], []).append(vb)
        for (node_host, node_port), node_vbuckets in by_node.items():
            conn = login.connect(node_host, node_port, password, tls_options)
            try:
                # active ones only: unfiltered, a node lists its replicas too, whose seqno is not the vbucket's
                seqnos = conn.check(Opcode.GET_ALL_VB_SEQNOS, vbucket_state_filter=ACTIVE).field("vbucket_seqnos")
                high = {int(e.vbucket): int(e.seqno) for e in seqnos or ()}
                unlisted = [vb for vb in node_vbuckets if vb not in high]
                if unlisted:
                    env.stderr.write(f"dcpctl: warning: {shown(conn.label)} does not list vbucket"
                                     f"{'s' if len(unlisted) > 1 else ''} {', '.join(map(str, unlisted))} as active "
                                     "there (GET_ALL_VB_SEQNOS): the cluster map may be stale; high_seqno null\n")
                for vb in node_vbuckets:
                    entries = failover_entries(conn.check(Opcode.GET_FAILOVER_LOG, f"GET_FAILOVER_LOG vbucket {vb}",
                                                          vbucket=vb))
                    rows.append({"vbucket": vb, "failover_log": [e.to_json() for e in entries],
                                 "high_seqno": high.get(vb),
                                 "node": conn.label})
            finally:
                conn.close()
    rows.sort(key=lambda r: r["vbucket"])
    if earlier is not None and chosen is not None:  # the vbuckets left out are not missing from this dump
        earlier = {vb: dumped for vb, dumped in earlier.items() if vb in chosen}
    changes = compare(earlier, dump_logs(rows)) if earlier is not None else None
    if env.output_format(fmt, FailoverFormat.TABLE, FailoverFormat.JSON) is FailoverFormat.JSON:
        if changes is not None:
            env.stdout.write(json.dumps([c.to_json() for c in changes]) + "\n")
        else:
            env.stdout.write(json.dumps(rows) + "\n")
        return
    console = env.console()
    if changes is not None:
        for change in changes:
            if change.kind != "unchanged":
                console.print(change.message, style="red" if change.kind == "divergent" else "yellow", markup=False)
        unchanged = sum(1 for c in changes if c.kind == "unchanged")
        console.print(f"{unchanged} of {len(changes)} vbuckets unchanged")
        return
    table = Table("vbucket", "high seqno", "entries", "failover log (uuid@seqno, newest first)", "node",
                  title=f"failover logs of {escape(login.bucket)}")
    for row in rows:
        log = ", ".join(f"{e['vbucket_uuid']}@{e['seqno']}" for e in row["failover_log"])
        high = row["high_seqno"]
        table.add_row(str(row["vbucket"]), "?" if high is None else str(high), str(len(row["failover_log"])), log,
                      escape(row["node"]))  # text, not markup: an IPv6 node's [fe80::1] is no style tag
    print_table(console, table)

