"""``hami`` with the made-up ``TOY`` vendor (``tests/toyvendor.py``) in its registry, for one end-to-end test.

Used as ``HamiScheduler(wrapper=TOY_WRAPPER)``: the harness then runs ``python -m tests.e2e.toy_hami <hami>
scheduler …`` with the repository root on ``PYTHONPATH``; the console script's path (the first argument) is
dropped and the rest goes to hami's own CLI, in this process, once the registry the scheduler runtime builds from
has been extended by ``TOY``. Nothing else changes: the same settings, watches, extender, node locker and HTTP
stack as ``hami scheduler``.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from pathlib import Path
from typing import Final

import hami.server.runtime as runtime
from hami.cli import main
from hami.config import DeviceConfig
from hami.devices import vendors_from_config
from hami.devices.base import Vendor
from tests.toyvendor import TOY, ToyVendor

ROOT: Final = Path(__file__).resolve().parents[2]
TOY_WRAPPER: Final = ("env", f"PYTHONPATH={ROOT}", sys.executable, "-m", "tests.e2e.toy_hami")
"""The ``HamiScheduler`` wrapper that runs this module in place of the ``hami`` console script."""


def with_toy(config: DeviceConfig, enabled: Collection[str] | None = None) -> dict[str, Vendor]:
    return {**vendors_from_config(config, enabled), TOY: ToyVendor()}


if __name__ == "__main__":
    vars(runtime)["vendors_from_config"] = with_toy  # the name the runtime builds its registry with
    sys.argv = ["hami", *sys.argv[2:]]
    main()
