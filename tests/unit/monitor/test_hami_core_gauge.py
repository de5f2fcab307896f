"""The monitor's ``hami_core_library_present{node}``: 1 when HAMi-core's library (the file the device plugin mounts
into GPU containers) is on the node, 0 when it is missing; looked at on every scrape."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from hami.deviceplugin.response import HostFiles
from hami.monitor.monitor import Monitor, MonitorOptions

NODE = "gpu-1"


def present(monitor: Monitor) -> list[tuple[dict[str, str], float]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(monitor)
    return [
        (dict(s.labels), s.value)
        for family in registry.collect()
        for s in family.samples
        if s.name == "hami_core_library_present"
    ]


def test_the_gauge_follows_the_library_on_the_host(tmp_path: Path) -> None:
    host = HostFiles(hook_path="/usr/local", libvgpu_version="v2.10.0", root=tmp_path / "host")
    vgpu = tmp_path / "host/usr/local/vgpu"
    (vgpu / "containers").mkdir(parents=True)
    monitor = Monitor(None, MonitorOptions(node_name=NODE, containers_dir=vgpu / "containers", hami_core=host))
    assert present(monitor) == [({"node": NODE, "zone": "vGPU"}, 0.0)]
    (vgpu / "libvgpu.so.v2.10.0").write_bytes(b"\x7fELF" + bytes(60))
    assert present(monitor) == [({"node": NODE, "zone": "vGPU"}, 1.0)]


def test_without_a_place_to_look_the_gauge_is_not_served(tmp_path: Path) -> None:
    assert present(Monitor(None, MonitorOptions(node_name=NODE, containers_dir=tmp_path))) == []
