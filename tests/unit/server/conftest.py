"""Fixtures of the server's unit tests (the builders are in ``support.py``)."""

from __future__ import annotations

import pytest

from tests.unit.server.support import World, make_world


@pytest.fixture
def world() -> World:
    return make_world()
