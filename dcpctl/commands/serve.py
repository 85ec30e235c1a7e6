"""``dcpctl serve``: a DCP producer that behaves as a Couchbase data node does, for development and tests."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Annotated, Any, Final

import typer

from dcpctl.commands._options import env_of
from dcpctl.errortext import file_error, ssl_reason
from dcpctl.exitcode import CommandError, ExitCode
from dcpctl.producer import data as documents
from dcpctl.producer import manifestfile, scenario
from dcpctl.producer.connection import MAX_SEND_QUEUE_SIZE, MAX_UNAUTHENTICATED_PACKET_SIZE
from dcpctl.producer.kv import MAX_ITEM_SIZE
from dcpctl.producer.server import Emulator, ServeOptions
from dcpctl.producer.store import DEFAULT_MEMORY_QUOTA, MAX_REPLICAS, Bucket, Manifest
from dcpctl.safetext import shown

# The highest TCP port: node i listens on the first port + i, so the last node's port must not pass it.
MAX_PORT: Final = 65535
DEFAULT_PASSWORD: Final = "password"  # noqa: S105 - the documented development default, like Couchbase's samples
DEV_NOTE: Final = "For development, not a database: documents live in memory until it stops."


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (loopback by default).", metavar="ADDRESS")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=MAX_PORT, help="Port of the first node (0: any "
                                      "free port; the chosen ports are printed).", metavar="PORT")] = 11210,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=64, help="Nodes in the emulated cluster, on "
                                       "consecutive ports; vbucket v is active on node v mod N.", metavar="N")] = 1,
    bucket: Annotated[str, typer.Option("--bucket", help="The bucket's name.", metavar="BUCKET")] = "default",
    user: Annotated[str, typer.Option("--user", "-u", help="The one user SASL accepts.",
                                      metavar="USER")] = "Administrator",
    password: Annotated[str, typer.Option("--password", help="Its password (development default; see "
                                          "--password-env to keep a real one off the command line).",
                                          metavar="PASSWORD")]
    = DEFAULT_PASSWORD,
    password_env: Annotated[str | None, typer.Option("--password-env", help="Read the password from this "
                                                     "environment variable instead.", metavar="VAR")] = None,
    vbuckets: Annotated[int, typer.Option("--vbuckets", min=1, max=1024, help="vbuckets in the bucket.",
                                          metavar="N")] = 64,
    items: Annotated[int, typer.Option("--items", min=0, help="Items at start, spread over the vbuckets.",
                                       metavar="N")] = 0,
    value_size: Annotated[int, typer.Option("--value-size", min=0, max=20 * 1024 * 1024,
                                            help="Bytes of each mutation's JSON value.", metavar="BYTES")] = 100,
    mutation_rate: Annotated[float, typer.Option("--mutation-rate", min=0, help="New items per second, "
                                                 "round robin over the vbuckets.", metavar="N")] = 0.0,
    takeover_max_time: Annotated[float, typer.Option("--takeover-max-time", min=0, help="Seconds a takeover "
                                                     "stream sends before its vbucket refuses writes (Etmpfail) "
                                                     "until it catches up.", metavar="SECONDS")] = 60.0,
    seed: Annotated[int, typer.Option("--seed", help="Makes uuids, keys and values reproducible.", metavar="N")] = 0,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM certificate: also listen with "
                                                  "TLS.", metavar="PEM")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.",
                                                 metavar="PEM")] = None,
    tls_port: Annotated[int, typer.Option("--tls-port", min=0, max=MAX_PORT, help="TLS port of the first "
                                          "node (0: any free port).", metavar="PORT")] = 11207,
    collections: Annotated[Path | None, typer.Option("--collections", help="Collections manifest (JSON as "
                                                     "the REST API returns it).", metavar="FILE")] = None,
    scenario_file: Annotated[Path | None, typer.Option("--scenario", help="Events to play: failovers, "
                                                       "purges, disconnects, delays, moves (TOML).",
                                                       metavar="FILE")] = None,
    max_send_queue_size: Annotated[int, typer.Option("--max-send-queue-size", min=1, help="Bytes of answers "
                                                     "queued for a client before its further requests wait (and "
                                                     "its socket is not read) until it reads them (kv_engine's "
                                                     "max_send_queue_size).", metavar="BYTES")] = MAX_SEND_QUEUE_SIZE,
    max_unauthenticated_packet_size: Annotated[int, typer.Option("--max-unauthenticated-packet-size", min=24,
                                                                 help="Longest packet accepted before "
                                                                 "authentication; a longer one disconnects "
                                                                 "(kv_engine's MaxUnauthenticatedFrameSize).",
                                                                 metavar="BYTES")]
    = MAX_UNAUTHENTICATED_PACKET_SIZE,
    max_item_size: Annotated[int, typer.Option("--max-item-size", min=1, help="Largest document value a client "
                                               "may write; a larger one is E2big (kv_engine's max_item_size).",
                                               metavar="BYTES")] = MAX_ITEM_SIZE,
    silent_replicas: Annotated[int, typer.Option("--silent-replicas", min=0, max=MAX_REPLICAS,
                                                 help="Replicas each vbucket's topology names that never "
                                                 "acknowledge: with any, a durable write waits for its "
                                                 "durability timeout, then aborts (SyncWriteAmbiguous).",
                                                 metavar="N")] = 0,
    memory_quota: Annotated[int, typer.Option("--memory-quota", min=0, help="Bytes of client writes kept "
                                              "(every write stays as an item); above it a write is Enomem.",
                                              metavar="BYTES")] = DEFAULT_MEMORY_QUOTA,
    data: Annotated[Path | None, typer.Option("--data", help="Documents to start with: JSON lines of key, "
                                              "value and optionally collection, flags, expiry.",
                                              metavar="FILE.jsonl")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log connections and scenario events "
                                          "to standard error.")] = False,
) -> None:
    """Emulate Couchbase data nodes that produce DCP, to stream from without a cluster.

    The nodes answer HELLO, SASL (PLAIN, SCRAM), bucket selection, failover logs and stream requests with
    the server's checks and rollbacks; they do flow control and noops, and play scripted scenarios. SDKs
    write and read documents (GET, SET, DELETE...), and each write goes to the open streams at once.

    Development defaults: bucket 'default', user Administrator, password 'password', loopback only.
    """
    env = env_of(ctx)
    # the banner names the password only when it is the built-in one: anything else may be a real secret
    said = f"password {DEFAULT_PASSWORD!r} (the default)" if password == DEFAULT_PASSWORD else \
        "the password given with --password"
    if password_env is not None:
        if password_env not in os.environ:
            raise CommandError(f"--password-env: {password_env} is not set", ExitCode.USAGE)
        password = os.environ[password_env]
        said = f"the password from ${shown(password_env)}"
    if (tls_cert is None) != (tls_key is None):
        raise CommandError("--tls-cert and --tls-key go together", ExitCode.USAGE)
    # refused here, as a usage error: binding would fail on the first node past 65535 with an OverflowError
    for option, first, used in (("--port", port, True), ("--tls-port", tls_port, tls_cert is not None)):
        if used and first and first + nodes - 1 > MAX_PORT:
            raise CommandError(f"{option} {first} with --nodes {nodes}: the last node would listen on "
                               f"{first + nodes - 1}, past {MAX_PORT}", ExitCode.USAGE)
    tls = None
    if tls_cert is not None and tls_key is not None:
        for option, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
            try:  # each file on its own first: ssl's error names neither
                path.open("rb").close()
            except OSError as exc:
                raise CommandError(file_error(f"{option}: {path}", exc), ExitCode.INPUT) from None
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            tls.load_cert_chain(tls_cert, tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"--tls-cert {tls_cert}, --tls-key {tls_key}: not a PEM certificate and its key"
                               f"{ssl_reason(exc)}", ExitCode.INPUT) from None
    manifest = _manifest(collections) if collections is not None else None
    try:
        events = scenario.load(scenario_file) if scenario_file is not None else []
        scenario.check(events, vbuckets, nodes, str(scenario_file), manifest, memory_quota)
    except scenario.ScenarioError as exc:
        raise CommandError(f"--scenario: {exc}", ExitCode.INPUT) from None
    store = Bucket(bucket, vbuckets, items, value_size, seed, manifest, silent_replicas=silent_replicas,
                   memory_quota=memory_quota)
    if data is not None:
        _load(data, store, max_item_size)
    errors = env.error_console()

    def log(line: str) -> None:
        if verbose:
            errors.print(f"dcpctl serve: {line}", markup=False, highlight=False)

    emulator = Emulator(store, {user: password},
                        ServeOptions(host, port, nodes, tls_port if tls else None, tls, mutation_rate, events,
                                     max_send_queue_size, max_unauthenticated_packet_size, max_item_size,
                                     takeover_max_time), log)
    try:
        asyncio.run(_serve(emulator, env.stdout, tls is not None, f"user {user!r}, {said}"))
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", ExitCode.CONNECTION) from None


async def _serve(emulator: Emulator, out: Any, tls: bool, login: str) -> None:
    """Listens, then prints the ports and what is in effect (``login``: the user and where the password came
    from); serves until SIGINT or SIGTERM."""
    addresses = await emulator.start_listening()
    for index, (host, bound) in enumerate(addresses):
        line = f"dcpctl serve: node {index} listening on {host}:{bound}"
        if tls and emulator.cluster.tls_ports:
            line += f" (TLS on {emulator.cluster.tls_ports[index]})"
        out.write(line + "\n")
    where = ", loopback only" if all(_loopback(host) for host, _ in addresses) else ""
    out.write(f"dcpctl serve: bucket {emulator.bucket.name!r}, {len(emulator.bucket.vbuckets)} vbuckets, "
              f"{_items(emulator.bucket)} items; {login}{where}. {DEV_NOTE}\n")
    out.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ticker = asyncio.create_task(emulator.run())
    await stop.wait()
    ticker.cancel()
    emulator.close()


def _items(bucket: Bucket) -> int:
    """The items the vbuckets hold: their seqnos less the manifest's system events that open each history."""
    return sum(vb.high_seqno - len(bucket.events) for vb in bucket.vbuckets)


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost: it may resolve anywhere
        return False


def _load(path: Path, store: Bucket, max_item_size: int) -> None:
    """--data: every line's document, or one line saying which line is wrong (exit 3)."""
    limit = max_item_size + documents.LINE_OVERHEAD + 1  # one byte more: a longer line is refused, not split

    def lines(file: IO[bytes]) -> Iterator[bytes]:
        while line := file.readline(limit):
            yield line

    try:
        with path.open("rb") as file:
            documents.load(lines(file), store, max_item_size)
    except OSError as exc:
        raise CommandError(file_error(f"--data: {path}", exc), ExitCode.INPUT) from None
    except documents.DataError as exc:
        raise CommandError(f"--data: {shown(str(path))}: {exc}", ExitCode.INPUT) from None


def _manifest(path: Path) -> Manifest:
    try:
        return manifestfile.read(path)
    except manifestfile.ManifestError as exc:
        raise CommandError(f"--collections: {exc}", ExitCode.INPUT) from None
