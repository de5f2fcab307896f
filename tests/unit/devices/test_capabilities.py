"""A vendor's capabilities are declared on its class (``SharedDeviceVendor.screens``, ``ordered_by_policy``), and a
declaration its class contradicts is refused when the class is made, not found out by a wrong decision later."""

from __future__ import annotations

from typing import Any

import pytest

from hami.config import default_device_config
from hami.devices import vendors_from_config
from hami.devices.base import ContainerRequest, FitContext, Selector
from hami.devices.common import SharedDeviceVendor
from hami.devices.table import DeviceTable


def test_exactly_the_vendors_that_keep_the_shared_fit_declare_screening() -> None:
    for vendor in vendors_from_config(default_device_config()).values():
        if isinstance(vendor, SharedDeviceVendor):
            keeps_fit = type(vendor).fit is SharedDeviceVendor.fit
            assert vendor.screens is keeps_fit, type(vendor).__name__


def test_a_vendor_with_its_own_fit_cannot_declare_screening() -> None:
    with pytest.raises(TypeError, match="has its own fit and declares screens"):

        class Lying(SharedDeviceVendor):  # refused when the class is made
            screens = True

            def fit(self, table: DeviceTable, request: ContainerRequest, ctx: FitContext, selector: Selector) -> Any:
                return super().fit(table, request, ctx, selector)


def test_a_vendor_with_its_own_order_must_say_so() -> None:
    with pytest.raises(TypeError, match="declare ordered_by_policy = False"):

        class Unsaid(SharedDeviceVendor):
            def order(self, table: DeviceTable, scores: Any, ctx: FitContext) -> Any:
                return range(len(table.infos))

    class Said(SharedDeviceVendor):
        ordered_by_policy = False

        def order(self, table: DeviceTable, scores: Any, ctx: FitContext) -> Any:
            return range(len(table.infos))

    assert Said.ordered_by_policy is False
