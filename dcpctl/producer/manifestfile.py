"""A collections manifest file, JSON as ns_server's REST API returns it (``GET /pools/default/buckets/B/scopes``):
what ``serve --collections`` starts the bucket with and a scenario's ``manifest`` event changes it to."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import orjson

from dcpctl.errortext import file_error, json_error
from dcpctl.producer.store import Manifest, memcached_max_ttl


class ManifestError(ValueError):
    """A manifest file that cannot be used, in one line naming the file."""


def read(path: Path) -> Manifest:
    """The manifest in ``path`` (uids are hex strings, a collection's optional maxTTL as ns_server writes it);
    one kv_engine would refuse (no default scope, the default collection elsewhere) is refused."""
    try:
        data = orjson.loads(path.read_bytes())  # bounded nesting
        manifest = Manifest(_uid(data.get("uid", "0"), 64), {}, {})
        for scope in data["scopes"]:
            scope_id = _uid(scope["uid"])
            manifest.scopes[scope_id] = str(scope["name"])
            for collection in scope.get("collections", []):
                collection_id = _uid(collection["uid"])
                manifest.collections[collection_id] = (scope_id, str(collection["name"]))
                max_ttl = memcached_max_ttl(collection.get("maxTTL", 0))
                if max_ttl is not None:
                    manifest.max_ttls[collection_id] = max_ttl
    except OSError as exc:
        raise ManifestError(file_error(str(path), exc)) from None
    except json.JSONDecodeError as exc:  # orjson's, with the position
        raise ManifestError(json_error(str(path), exc)) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ManifestError(f"{path}: not a collections manifest ({exc!s})") from None
    if not manifest.collections:
        raise ManifestError(f"{path}: no collections")
    refused = manifest.refusal()
    if refused is not None:
        raise ManifestError(f"{path}: not a collections manifest ({refused})")
    return manifest


def _uid(value: Any, bits: int = 32) -> int:
    """A manifest uid: hex digits (as the REST API writes them) of a u32 id, or the u64 manifest uid."""
    text = str(value)
    if not text or len(text) > bits // 4 or any(c not in string.hexdigits for c in text):
        raise ValueError(f"uid {text[:40]} is not a hex u{bits}")
    return int(text, 16)
