"""Any sequence of kubelet calls and plugin restarts (a crash at any point between two of them) leaves the claim
store consistent: a claim is prepared exactly when the last call for it was a prepare, its CDI spec and directory
exist exactly then, and a claim is never prepared twice (the same answer and the same HAMi-core cache across
retries and restarts)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hami.deviceplugin.discovery import GpuInfo
from hami.deviceplugin.dra.claims import spec_file_name
from hami.deviceplugin.dra.slices import slice_devices
from hami.deviceplugin.dra.state import ClaimStore, PreparedDevice, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.protocol.dra import ResourceClaim

DRIVER = "hami-core-gpu.project-hami.io"
GPUS = [GpuInfo(uuid=f"GPU-{i}", index=i, name="T4", memory_mib=15360, bus_id=f"0000:{i + 1:02x}:00.0", minor=i)
        for i in range(2)]  # fmt: skip
DEVICES = {d.name: d for d in slice_devices(GPUS, details={}, pcie_roots={})}
UIDS = ("u0", "u1", "u2")


def claim(uid: str) -> ResourceClaim:
    n = int(uid[1:])
    results = [{"request": "gpu", "driver": DRIVER, "pool": "node", "device": f"hami-gpu-{n % 2}", "shareID": f"s{n}",
                "consumedCapacity": {"memory": f"{n + 1}Gi", "cores": str(10 * n)}}]  # fmt: skip
    body = {
        "metadata": {"namespace": "ns", "name": uid, "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    return msgspec.convert(body, type=ResourceClaim)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="hami-dra-store-"))
        self.options = StoreOptions(plugin_dir=self.root / "plugin", cdi_dir=self.root / "cdi",
                                    host=HostFiles(libvgpu_version="", root=self.root / "host"))  # fmt: skip
        self.counter = 0
        self.store = self.new_store()
        self.model: dict[str, list[PreparedDevice]] = {}
        self.caches: dict[str, str] = {}

    def new_store(self) -> ClaimStore:
        def cache_id() -> str:
            self.counter += 1
            return f"c{self.counter}"

        return ClaimStore(self.options, cache_id)

    def spec(self, uid: str) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.options.cdi_dir / spec_file_name(uid)).read_text())
        return loaded

    @rule(uid=st.sampled_from(UIDS))
    def prepare(self, uid: str) -> None:
        answer = self.store.prepare(claim(uid), "node", DEVICES)
        if uid in self.model:
            assert answer == self.model[uid]  # never prepared twice
        self.model[uid] = answer
        cache = self.spec(uid)["containerEdits"]["env"][-1]
        assert self.caches.setdefault(uid, cache) == cache

    @rule(uid=st.sampled_from(UIDS))
    def unprepare(self, uid: str) -> None:
        assert self.store.unprepare(uid) is (uid in self.model)
        self.model.pop(uid, None)
        self.caches.pop(uid, None)

    @rule()
    def restart(self) -> None:
        self.store = self.new_store()

    @rule(uid=st.sampled_from(UIDS))
    def lose_spec_file(self, uid: str) -> None:
        (self.options.cdi_dir / spec_file_name(uid)).unlink(missing_ok=True)

    @invariant()
    def consistent(self) -> None:
        assert self.store.prepared() == dict.fromkeys(self.model, "PrepareCompleted")
        for uid in UIDS:
            directory = self.options.host.on_host(f"/usr/local/vgpu/claims/{uid}")
            assert directory.is_dir() is (uid in self.model)

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
