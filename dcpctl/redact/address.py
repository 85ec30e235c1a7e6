"""Prefix-preserving address mapping keyed by a salt (pure): the scheme of Crypto-PAn (Xu, Fan, Ammar, Moon,
"Prefix-preserving IP address anonymization", ICNP 2002) with HMAC-SHA256 as its pseudo-random function.

Bit i of a mapped address is bit i of the original flipped by one bit of HMAC(salt, i, the first i bits): two
addresses that share their first n bits map to two that share their first n bits, and no more, so subnets,
hosts of one subnet and client/server roles stay recognisable while the addresses do not. The same salt
gives the same mapping in every file.
"""

from __future__ import annotations

import hmac
from typing import Final

# Addresses mapped and remembered: a capture has few distinct ones; past this many each is mapped again
# (a scan's thousands of addresses then cost 32 or 128 HMACs each, not memory).
MAX_REMEMBERED: Final = 65536


class AddressMap:
    def __init__(self, salt: bytes) -> None:
        self.salt = salt
        self._known: dict[bytes, bytes] = {}
        self.mapped = 0  # distinct addresses mapped (while they are remembered)

    def __call__(self, raw: bytes) -> bytes:
        """The mapped form of a packed IPv4 (4 bytes) or IPv6 (16 bytes) address."""
        found = self._known.get(raw)
        if found is None:
            found = self._map(raw)
            if len(self._known) < MAX_REMEMBERED:
                self._known[raw] = found
                self.mapped += 1
        return found

    def _map(self, raw: bytes) -> bytes:
        bits = len(raw) * 8
        value = int.from_bytes(raw, "big")
        out = 0
        for i in range(bits):
            prefix = (value >> (bits - i)).to_bytes(len(raw), "big") if i else b""
            pad = hmac.digest(self.salt, b"address" + bytes([len(raw), i]) + prefix, "sha256")[0] & 1
            out = (out << 1) | (((value >> (bits - 1 - i)) & 1) ^ pad)
        return out.to_bytes(len(raw), "big")
