"""TLS recognised by its record layer: the first bytes of a connection's stream that open a TLS handshake.

A TLS connection starts with a handshake record (RFC 8446 section 5.1, RFC 5246 section 6.2.1): content type
22, a record version 3.1 to 3.4, a 16-bit length of at most 2^14, then the first handshake message's type
(RFC 8446 section 4): ClientHello from the client, ServerHello from the server. No memcached binary protocol
stream can start so (its first byte is a magic), so six bytes decide.
"""

from __future__ import annotations

from typing import Final

TLS_HANDSHAKE: Final = 22  # ContentType handshake
# Record versions: TLS 1.3 sends 0x0301 or 0x0303 in the record layer (RFC 8446 5.1); older peers their own.
TLS_VERSIONS: Final = {0x0301: "1.0", 0x0302: "1.1", 0x0303: "1.2", 0x0304: "1.3"}
HELLO_TYPES: Final = {1: "ClientHello", 2: "ServerHello"}  # HandshakeType client_hello, server_hello
MAX_TLS_RECORD: Final = 1 << 14  # TLSPlaintext.length must not exceed 2^14 (RFC 8446 5.1)
HANDSHAKE_HEADER: Final = 4  # a record holding a hello holds at least its type and 24-bit length
TLS_PROBE_LENGTH: Final = 6  # record header (type, version, length) and the handshake type


def tls_hello(prefix: bytes) -> str | None:
    """What the first bytes of a stream say: a description (``"ClientHello in a TLS 1.0 record"``) when they
    open a TLS handshake, ``""`` when they cannot, None while fewer than :data:`TLS_PROBE_LENGTH` bytes
    leave it open."""
    if not prefix:
        return None
    if prefix[0] != TLS_HANDSHAKE or (len(prefix) >= 2 and prefix[1] != 3):
        return ""
    if len(prefix) >= 3 and (0x0300 | prefix[2]) not in TLS_VERSIONS:
        return ""
    if len(prefix) < TLS_PROBE_LENGTH:
        return None
    length = prefix[3] << 8 | prefix[4]
    hello = HELLO_TYPES.get(prefix[5])
    if hello is None or not HANDSHAKE_HEADER <= length <= MAX_TLS_RECORD:
        return ""
    return f"{hello} in a TLS {TLS_VERSIONS[0x0300 | prefix[2]]} record"
