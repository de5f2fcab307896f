"""The periodic clean-up of prepared claims gone from the API: against a scripted API server, with the real
claim store (CDI spec file, claim directory, checkpoint entry)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from hami.deviceplugin.dra.checkpoint import FILE_NAME, load
from hami.deviceplugin.dra.claims import claim_dir, spec_file_name
from hami.deviceplugin.dra.plugin import claim_reader, clean_up_gone_claims, clean_up_loop
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.k8s.client import ClientSettings, KubeClient
from hami.k8s.config import KubeConfig
from hami.protocol.dra import ResourceClaim
from tests.unit.deviceplugin.test_dra_plugin import DRIVER, inventory_of
from tests.unit.k8s.fakeapi import FakeApi, Reply, serve, status_body

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"


def claim_body(name: str, uid: str) -> dict[str, object]:
    result = {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "hami-gpu-0", "shareID": f"s-{uid}",
              "consumedCapacity": {"memory": "1000Mi", "cores": "10"}}  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "1"},
            "status": {"allocation": {"devices": {"results": [result]}}}}  # fmt: skip


@pytest.fixture
async def client() -> AsyncIterator[tuple[FakeApi, KubeClient]]:
    fake = FakeApi()
    async with serve(fake.app) as url:
        settings = ClientSettings(request_timeout=5, retry_jitter=0.0, max_retries=0)
        async with KubeClient(KubeConfig(server=url, token="t"), settings) as kube:
            yield fake, kube


def prepared_store(tmp_path: Path, names: dict[str, str]) -> tuple[ClaimStore, StoreOptions]:
    host = HostFiles(libvgpu_version="", root=tmp_path / "host")
    options = StoreOptions(plugin_dir=tmp_path / "plugin", cdi_dir=tmp_path / "cdi", host=host, device_nodes=False)
    store = ClaimStore(options)
    devices = inventory_of().by_name()
    for name, uid in names.items():
        store.prepare(msgspec.convert(claim_body(name, uid), type=ResourceClaim), "node-1", devices)
    return store, options


def files_of(options: StoreOptions, uid: str) -> tuple[bool, bool]:
    spec = (options.cdi_dir / spec_file_name(uid)).exists()
    directory = options.host.on_host(claim_dir(options.host, uid)).exists()
    return spec, directory


async def test_claims_gone_or_replaced_are_unprepared_the_rest_kept(
    client: tuple[FakeApi, KubeClient], tmp_path: Path
) -> None:
    fake, kube = client
    store, options = prepared_store(tmp_path, {"live": "u-live", "deleted": "u-deleted", "renewed": "u-old",
                                               "unasked": "u-unasked"})  # fmt: skip
    fake.script("GET", f"{CLAIMS}/live", Reply(200, claim_body("live", "u-live")))
    fake.script("GET", f"{CLAIMS}/deleted", Reply(404, status_body(404, "not found", "NotFound")))
    fake.script("GET", f"{CLAIMS}/renewed", Reply(200, claim_body("renewed", "u-new")))  # same name, new claim
    fake.script("GET", f"{CLAIMS}/unasked", Reply(500, status_body(500, "etcd is down", "InternalError")))

    gone = await clean_up_gone_claims(store, claim_reader(kube))

    assert sorted(gone) == ["u-deleted", "u-old"]
    assert store.prepared() == {"u-live": "PrepareCompleted", "u-unasked": "PrepareCompleted"}
    assert set(load(options.plugin_dir / FILE_NAME)) == {"u-live", "u-unasked"}  # the checkpoint on disk
    for uid in ("u-deleted", "u-old"):
        assert files_of(options, uid) == (False, False)
    for uid in ("u-live", "u-unasked"):  # an API error never unprepares
        assert files_of(options, uid) == (True, True)
    assert len(fake.calls("GET")) == 4


async def test_the_loop_runs_every_interval_until_cancelled(client: tuple[FakeApi, KubeClient], tmp_path: Path) -> None:
    fake, kube = client
    store, _ = prepared_store(tmp_path, {"deleted": "u-deleted"})
    fake.script("GET", f"{CLAIMS}/deleted", Reply(404, status_body(404, "not found", "NotFound")))
    task = asyncio.create_task(clean_up_loop(store, claim_reader(kube), interval_s=0.01))
    try:
        async with asyncio.timeout(10):
            while store.prepared():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert store.entries() == {}
