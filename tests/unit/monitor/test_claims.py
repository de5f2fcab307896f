"""DRA claims' HAMi-core regions (hami's DRA plugin's layout, prepared by the real claim store): reported per
container that uses the claim, by claim when none does, fed back like the others, never removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from hami.deviceplugin.dra.checkpoint import FILE_NAME
from hami.deviceplugin.dra.state import ClaimStore, StoreOptions
from hami.deviceplugin.response import HostFiles
from hami.monitor.claims import claim_users
from hami.monitor.gpustats import FakeStatsNvml
from hami.monitor.monitor import Monitor, MonitorOptions
from hami.protocol.dra import ResourceClaim
from hami.protocol.objects import Pod
from tests.unit.deviceplugin.test_dra_plugin import DRIVER, inventory_of
from tests.unit.monitor.regionfile import Proc, build_region, read_back
from tests.unit.monitor.test_monitor import FIXTURE, GIB, NODE, NOW, samples

GPU0 = inventory_of().by_name()["hami-gpu-0"].gpu.uuid


def claim(name: str, uid: str) -> ResourceClaim:
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "hami-gpu-0", "shareID": f"s-{uid}",
              "consumedCapacity": {"memory": "1024Mi", "cores": "20"}}  # fmt: skip
    body = {"metadata": {"namespace": "team", "name": name, "uid": uid},
            "status": {"allocation": {"devices": {"results": [result]}}}}  # fmt: skip
    return msgspec.convert(body, type=ResourceClaim)


def prepare(tmp_path: Path, claims: dict[str, str]) -> tuple[StoreOptions, dict[str, Path]]:
    """Prepare the claims (name → UID) with the DRA plugin's store; returns where each claim's region goes."""
    options = StoreOptions(plugin_dir=tmp_path / "plugin", cdi_dir=tmp_path / "cdi", device_nodes=False,
                           host=HostFiles(libvgpu_version="", root=tmp_path / "host"))  # fmt: skip
    store = ClaimStore(options)
    caches = {}
    for name, uid in claims.items():
        store.prepare(claim(name, uid), NODE, inventory_of().by_name())
        spec = msgspec.json.decode((tmp_path / "plugin" / FILE_NAME).read_bytes())["claims"][uid]["spec"]
        env = dict(e.split("=", 1) for e in spec["containerEdits"]["env"])
        caches[uid] = options.host.on_host(env["CUDA_DEVICE_MEMORY_SHARED_CACHE"])
    return options, caches


def pod(name: str, claims: dict[str, str], containers: dict[str, list[str]]) -> Pod:
    """``claims``: entry name → ``claim:<name>`` (direct) or ``template:<generated name>``."""
    entries: list[dict[str, Any]] = []
    statuses = []
    for entry, ref in claims.items():
        kind, _, claim_name = ref.partition(":")
        if kind == "claim":
            entries.append({"name": entry, "resourceClaimName": claim_name})
        else:
            entries.append({"name": entry, "resourceClaimTemplateName": "tpl"})
            statuses.append({"name": entry, "resourceClaimName": claim_name})
    body = {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
        "spec": {"nodeName": NODE, "resourceClaims": entries,
                 "containers": [{"name": c, "resources": {"claims": [{"name": u} for u in used]}}
                                for c, used in containers.items()]},
        "status": {"resourceClaimStatuses": statuses},
    }  # fmt: skip
    return msgspec.convert(body, type=Pod)


def monitor(options: StoreOptions, tmp_path: Path, pods: list[Pod] | None, checkpoint: Path | None = None) -> Monitor:
    lib = FakeStatsNvml(FIXTURE)
    lib.init()
    vgpu = options.host.on_host(options.host.vgpu_dir)
    (vgpu / "containers").mkdir(parents=True, exist_ok=True)
    opts = MonitorOptions(node_name=NODE, containers_dir=vgpu / "containers", claims_dir=vgpu / "claims",
                          dra_checkpoint=checkpoint or options.plugin_dir / FILE_NAME)  # fmt: skip
    m = Monitor(lib, opts, clock=lambda: NOW)
    if pods is not None:
        m.set_pods(pods)
    return m


def used(pod_name: str, container: str, namespace: str = "team") -> tuple[str, tuple[tuple[str, str], ...]]:
    labels = {"namespace": namespace, "pod": pod_name, "container": container, "vdevice_index": "0",
              "device_uuid": GPU0, "zone": "vGPU"}  # fmt: skip
    return "hami_vgpu_memory_used_bytes", tuple(sorted(labels.items()))


def test_claim_regions_are_reported_per_container_that_uses_the_claim_else_by_claim(tmp_path: Path) -> None:
    options, caches = prepare(tmp_path, {"train-gpu-x7": "u-train", "shared": "u-shared", "orphan": "u-orphan"})
    for i, (_uid, cache) in enumerate(sorted(caches.items()), start=1):
        cache.write_bytes(build_region([GPU0], limits=[GIB], procs=[Proc(i, {0: (0, 0, i * 100, i * 100)})]))
    stray = options.host.on_host(f"{options.host.vgpu_dir}/claims/u-stray")  # in no checkpoint entry
    stray.mkdir()
    (stray / "ab.cache").write_bytes(build_region([GPU0], limits=[GIB], procs=[Proc(9, {0: (0, 0, 900, 900)})]))
    pods = [
        pod("train", {"gpu": "template:train-gpu-x7"}, {"main": ["gpu"], "side": []}),
        pod("a", {"g": "claim:shared"}, {"x": ["g"]}),
        pod("b", {"g": "claim:shared"}, {"y": ["g"]}),
    ]
    got = samples(monitor(options, tmp_path, pods))

    # regions in UID order: u-orphan 100, u-shared 200, u-train 300
    assert got[used("train", "main")] == 300
    assert got[used("a", "x")] == got[used("b", "y")] == 200  # one region, the claim's usage, for each container
    assert got[used("", "claim:orphan")] == 100  # no pod here uses it: reported by claim
    assert got[used("", "claim:u-stray", namespace="")] == 900  # not in the checkpoint: by UID
    assert not any(labels and ("container", "side") in labels for _, labels in got)
    assert got[("hami_vgpu_monitor_regions", ())] == 5


def test_claim_regions_get_feedback_and_are_never_removed(tmp_path: Path) -> None:
    options, caches = prepare(tmp_path, {"shared": "u-shared"})
    cache = caches["u-shared"]
    cache.write_bytes(build_region([GPU0], priority=1, recent_kernel=2))
    m = monitor(options, tmp_path, [])  # no pod here: the claim's directory still stays (the plugin owns it)
    assert m.feedback_round(clean_up=True) == 1
    assert read_back(cache).recent_kernel == 1
    assert cache.exists()


def test_an_unreadable_checkpoint_is_reported_and_claims_are_reported_by_uid(tmp_path: Path) -> None:
    options, caches = prepare(tmp_path, {"shared": "u-shared"})
    caches["u-shared"].write_bytes(build_region([GPU0], procs=[Proc(1, {0: (0, 0, 5, 5)})]))
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    got = samples(monitor(options, tmp_path, [pod("a", {"g": "claim:shared"}, {"x": ["g"]})], checkpoint=broken))
    assert got[used("", "claim:u-shared", namespace="")] == 5
    skipped = [labels for name, labels in got if name == "hami_vgpu_monitor_region_skipped"]
    assert [dict(labels)["path"] for labels in skipped] == [str(broken)]


def test_without_the_pod_list_no_claim_is_read(tmp_path: Path) -> None:
    options, caches = prepare(tmp_path, {"shared": "u-shared"})
    caches["u-shared"].write_bytes(build_region([GPU0]))
    assert samples(monitor(options, tmp_path, None))[("hami_vgpu_monitor_regions", ())] == 0


def test_claim_users_resolve_templates_and_direct_claims_per_container() -> None:
    p = pod("p", {"one": "claim:direct", "two": "template:gen-1"}, {"c1": ["one", "two"], "c2": ["two"], "c3": []})
    users = claim_users([p])
    assert {k: [c for _, c in v] for k, v in users.items()} == {
        ("team", "direct"): ["c1"],
        ("team", "gen-1"): ["c1", "c2"],
    }
