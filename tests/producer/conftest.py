"""Every client a test opened is closed when it ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wire import close_all


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    close_all()
