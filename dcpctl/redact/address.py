"""Prefix-preserving address mapping keyed by a salt (pure): the scheme of Crypto-PAn (Xu, Fan, Ammar, Moon,
"Prefix-preserving IP address anonymization", ICNP 2002) with HMAC-SHA256 as its pseudo-random function.

Bit i of a mapped address is bit i of the original flipped by one bit of HMAC(salt, i, the first i bits): two
addresses that share their first n bits map to two that share their first n bits, and no more, so subnets,
hosts of one subnet and client/server roles stay recognisable while the addresses do not. The same salt
gives the same mapping in every file.

MAC addresses: a vendor's (universally administered) address keeps its vendor's three bytes, which name no
one and tell a diagnosis the hardware or hypervisor, and has the other three mapped the same way; a locally
administered one (a container's, a VM's: random) is mapped but for its two flag bits; a group address
(broadcast, multicast) names no host and stays, as does the all-zero one of Linux's loopback.

Ports: a client's ephemeral port (32768 and up: Linux's range and IANA's dynamic one both start there, and
every port Couchbase Server listens on by default is below it) is mapped by a keyed permutation of that range
that skips the servers' ports given, so connections stay told apart and a service's port stays itself.
"""

from __future__ import annotations

import hmac
from collections import Counter
from typing import Final

# Addresses mapped and remembered: a capture has few distinct ones; past this many each is mapped again
# (a scan's thousands of addresses then cost 32 or 128 HMACs each, not memory).
MAX_REMEMBERED: Final = 65536
# Ports from here up are clients' ephemeral ones, mapped; those below name services, kept.
EPHEMERAL_PORTS: Final = 32768
# A MAC address's first byte: its group bit (broadcast, multicast) and its locally administered bit.
_GROUP: Final = 1
_LOCAL: Final = 2
_NO_MAC: Final = bytes(6)  # the loopback interface's: no card, nothing to hide, and it says "loopback"
# The bits of a MAC address kept as they are: a vendor's three bytes; a local address's two flag bits.
_VENDOR_FIXED: Final = ((1 << 24) - 1) << 24
_LOCAL_FIXED: Final = (_GROUP | _LOCAL) << 40
_PORT_ROUNDS: Final = 4  # a balanced Feistel network's rounds: four make a strong pseudo-random permutation


class AddressMap:
    def __init__(self, salt: bytes, service_ports: frozenset[int] = frozenset()) -> None:
        self.salt = salt
        # servers' ports (--port, a live connection's server): kept, and never the image of a client's port
        self.service_ports = service_ports
        self._known: dict[bytes, bytes] = {}
        self._ports: dict[int, int] = {}
        self._macs: dict[bytes, bytes] = {}

    def __call__(self, raw: bytes) -> bytes:
        """The mapped form of a packed IPv4 (4 bytes) or IPv6 (16 bytes) address."""
        found = self._known.get(raw)
        if found is None:
            found = self._map(raw)
            if len(self._known) < MAX_REMEMBERED:
                self._known[raw] = found
        return found

    def counts(self) -> Counter[str]:
        """The summary's figures: distinct IP addresses, client ports and MAC addresses mapped (of those
        remembered)."""
        return Counter(addresses=len(self._known), ports=len(self._ports), macs=len(self._macs))

    def mac(self, raw: bytes) -> bytes:
        """The mapped form of a 6-byte MAC address (see the module's docstring for what is kept)."""
        if raw[0] & _GROUP or raw == _NO_MAC:
            return raw
        found = self._macs.get(raw)
        if found is None:
            found = self._map(raw, _LOCAL_FIXED if raw[0] & _LOCAL else _VENDOR_FIXED)
            if len(self._macs) < MAX_REMEMBERED:
                self._macs[raw] = found
        return found

    def _map(self, raw: bytes, fixed: int = 0) -> bytes:
        """Crypto-PAn over ``raw``'s bits, those set in ``fixed`` (first bit first) left as they are."""
        bits = len(raw) * 8
        value = int.from_bytes(raw, "big")
        out = 0
        for i in range(bits):
            bit = (value >> (bits - 1 - i)) & 1
            if not fixed >> (bits - 1 - i) & 1:
                prefix = (value >> (bits - i)).to_bytes(len(raw), "big") if i else b""
                bit ^= hmac.digest(self.salt, b"address" + bytes([len(raw), i]) + prefix, "sha256")[0] & 1
            out = (out << 1) | bit
        return out.to_bytes(len(raw), "big")

    def port(self, port: int) -> int:
        """A TCP or UDP port as the mapped capture shows it: a client's ephemeral port to another ephemeral
        port (one to one), a service's port as it is."""
        if port < EPHEMERAL_PORTS or port in self.service_ports:
            return port
        found = self._ports.get(port)
        if found is None:
            # cycle walking: the permutation of all 16-bit values applied again until it lands in the range
            # mapped, which makes it a permutation of that range (it always comes back to ``port``)
            found = self._permuted(port)
            while found < EPHEMERAL_PORTS or found in self.service_ports:
                found = self._permuted(found)
            self._ports[port] = found  # at most 32768 of them
        return found

    def _permuted(self, value: int) -> int:
        left, right = divmod(value, 256)  # a 16-bit port's two bytes
        for i in range(_PORT_ROUNDS):
            pad = hmac.digest(self.salt, b"port" + bytes([i, right]), "sha256")[0]
            left, right = right, left ^ pad
        return left << 8 | right
