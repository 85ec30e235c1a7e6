"""SASL as memcached speaks it (reference 4.2): PLAIN and SCRAM-SHA1/256/512, both sides, pure.

Theory of operation. SCRAM (RFC 5802, no channel binding: ``n,,`` and ``c=biws``) proves the password
without sending it. The client sends ``n,,n=user,r=cnonce``; the server answers with the combined nonce,
a salt and an iteration count; the client proves ``ClientKey XOR HMAC(StoredKey, AuthMessage)``; the
server checks it and signs ``AuthMessage`` with its ServerKey, which the client verifies. memcached names
the mechanisms ``SCRAM-SHA512`` (no hyphen before the digits); the other spelling is accepted as an alias.
Nothing here touches a socket; errors are :class:`SaslError` with a one-line reason and never the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

# mechanism -> hashlib name; memcached's spellings first (the order the server offers them in)
MECHANISMS: Final = {"SCRAM-SHA512": "sha512", "SCRAM-SHA256": "sha256", "SCRAM-SHA1": "sha1"}
PLAIN: Final = "PLAIN"
# Iterations the emulated server asks for: kv_engine's default is 15000; the tests and benchmarks run many
# handshakes, and the count only changes the cost of a guess, so a development server uses fewer.
DEFAULT_ITERATIONS: Final = 4096
# Most iterations a client runs for a server (--max-scram-iterations): PBKDF2 runs before any answer can come,
# so a server naming 2000000000 would hold the client for many minutes. Couchbase asks 15000 by default;
# OWASP's highest recommendation (PBKDF2-HMAC-SHA1) is 1.3 million; two million is above every real setting
# and about a second of SHA-512, well inside the default --timeout.
MAX_SCRAM_ITERATIONS: Final = 2_000_000


class SaslError(Exception):
    """Authentication failed or the peer broke the protocol (the message never holds a secret; text from the
    peer in it is escaped where errors are written, in cli.py)."""


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error
        raise SaslError(f"malformed SCRAM {what}: not base64") from None


def canonical(mechanism: str) -> str:
    """``SCRAM-SHA-512`` and ``scram-sha512`` -> ``SCRAM-SHA512``; ``PLAIN`` stays."""
    name = mechanism.strip().upper()
    if name.startswith("SCRAM-SHA-"):
        name = "SCRAM-SHA" + name[len("SCRAM-SHA-"):]
    return name


def plain_message(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def parse_plain(message: bytes) -> tuple[str, str]:
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise SaslError("PLAIN message is not authzid NUL user NUL password")
    return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")


def _attributes(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        name, sep, value = part.partition("=")
        if sep and len(name) == 1:
            out[name] = value
    return out


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def _salted(digest: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


@dataclass
class ScramClient:
    mechanism: str
    user: str
    password: str
    nonce: str = ""
    max_iterations: int = MAX_SCRAM_ITERATIONS

    def __post_init__(self) -> None:
        self.mechanism = canonical(self.mechanism)
        if self.mechanism not in MECHANISMS:
            raise SaslError(f"unsupported mechanism {self.mechanism}")
        self.digest = MECHANISMS[self.mechanism]
        self.nonce = self.nonce or secrets.token_urlsafe(18)
        self._first_bare = f"n={_saslname(self.user)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode(errors="replace")
        attrs = _attributes(text)
        if "e" in attrs:
            raise SaslError(f"server error: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not (iterations.isascii() and iterations.isdigit()):
            raise SaslError("malformed SCRAM server-first message")
        count = int(iterations)
        if count < 1:  # RFC 5802: a positive count
            raise SaslError("malformed SCRAM server-first message: iteration count 0")
        if count > self.max_iterations:
            raise SaslError(f"the server asks for {count} SCRAM iterations, more than {self.max_iterations} "
                            "(--max-scram-iterations): refused rather than spend minutes on it")
        salted = _salted(self.digest, self.password, _b64(salt, "server-first message (salt)"), count)
        client_key = _hmac(self.digest, salted, b"Client Key")
        stored = hashlib.new(self.digest, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self._first_bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self.digest, stored, auth), strict=True))
        self._server_signature = _hmac(self.digest, _hmac(self.digest, salted, b"Server Key"), auth)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode(errors="replace"))
        if "e" in attrs:
            raise SaslError(f"server error: {attrs['e']}")
        if "v" not in attrs or not hmac.compare_digest(_b64(attrs["v"], "server-final message"),
                                                       self._server_signature):
            raise SaslError("the server's SCRAM signature does not match: not the server we asked")


@dataclass
class ScramServer:
    mechanism: str
    users: dict[str, str]  # user -> password
    iterations: int = DEFAULT_ITERATIONS
    salt_seed: bytes = b""

    def __post_init__(self) -> None:
        self.mechanism = canonical(self.mechanism)
        self.digest = MECHANISMS[self.mechanism]
        self.user = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._salted = b""

    def first(self, client_first: bytes) -> bytes:
        text = client_first.decode(errors="replace")
        if not text.startswith(("n,,", "y,,")):
            raise SaslError("SCRAM channel binding is not supported")
        self._first_bare = text[3:]
        attrs = _attributes(self._first_bare)
        self.user = attrs.get("n", "").replace("=2C", ",").replace("=3D", "=")
        if "r" not in attrs:
            raise SaslError("malformed SCRAM client-first message")
        self._nonce = attrs["r"] + secrets.token_urlsafe(18)
        salt = hashlib.sha256(self.salt_seed + self.user.encode()).digest()[:16]
        # an unknown user gets a well-formed challenge too, and fails at the proof: no user enumeration
        self._salted = _salted(self.digest, self.users.get(self.user, secrets.token_hex(16)), salt, self.iterations)
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={self.iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        text = client_final.decode(errors="replace")
        without_proof, sep, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if not sep or attrs.get("r") != self._nonce:
            raise SaslError("malformed SCRAM client-final message")
        auth = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        try:
            client_key_guess = base64.b64decode(proof_part, validate=True)
        except ValueError:  # binascii.Error: the client's proof is not base64
            raise SaslError("malformed SCRAM client-final message: the proof is not base64") from None
        stored = hashlib.new(self.digest, _hmac(self.digest, self._salted, b"Client Key")).digest()
        signature = _hmac(self.digest, stored, auth)
        if len(client_key_guess) != len(signature):
            raise SaslError("authentication failed")
        client_key = bytes(a ^ b for a, b in zip(client_key_guess, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), stored):
            raise SaslError("authentication failed")
        server_key = _hmac(self.digest, self._salted, b"Server Key")
        return f"v={base64.b64encode(_hmac(self.digest, server_key, auth)).decode()}".encode()


def _saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")
