"""Redaction of captured traffic: the pure core (:mod:`dcpctl.redact.core`) that rewrites one decoded message's
bytes; the capture edge lives in :mod:`dcpctl.sources.redaction`."""
