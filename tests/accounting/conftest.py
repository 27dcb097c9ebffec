"""Fixtures of the accounting tests."""

import pytest

from accounting.registry import registered_types, unregister_event


@pytest.fixture
def scratch_registry():
    """The event types registered during the test are unregistered after it."""
    before = set(registered_types().values())
    yield
    for cls in set(registered_types().values()) - before:
        unregister_event(cls)
