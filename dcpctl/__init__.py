"""dcpctl: see, capture and understand Couchbase's Database Change Protocol (DCP)."""

__version__ = "0.1.0"
