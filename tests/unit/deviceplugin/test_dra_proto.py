"""hami's kubelet DRA and plugin-registration .proto files carry kubelet's own wire contract.

Both files are compiled with protoc (grpc_tools) into descriptors and compared with kubelet's own files from the
Go module cache (``make testenv`` puts k8s.io/kubelet there): package, services and methods (the gRPC paths), and
every message's fields by number, name, type, label and proto3 ``optional``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

OURS = Path(__file__).parents[3] / "src" / "hami" / "deviceplugin" / "dra"
KUBELET = "k8s.io/kubelet@v0.37.2/pkg/apis"
PAIRS = [("draplugin.proto", "dra/v1/api.proto"), ("registration.proto", "pluginregistration/v1/api.proto")]


def module_cache() -> Path | None:
    go = shutil.which("go")
    if go is None:
        return None
    out = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=False).stdout.strip()
    path = Path(out) / KUBELET
    return path if out and path.is_dir() else None


def compile_proto(path: Path, tmp: Path) -> descriptor_pb2.FileDescriptorProto:
    out = tmp / f"{path.parent.name}-{path.name}.pb"
    assert protoc.main(["protoc", f"-I{path.parent}", f"--descriptor_set_out={out}", path.name]) == 0
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert len(files) == 1
    return files[0]


def shape(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    def fields(message: descriptor_pb2.DescriptorProto) -> dict[str, Any]:
        nested = {n.name: fields(n) for n in message.nested_type}
        own = {
            f.number: (f.name, f.type, f.label, f.type_name.rsplit(".", 1)[-1], f.proto3_optional)
            for f in message.field
        }
        return {"fields": own, "nested": nested}

    return {
        "package": file.package,
        "services": {
            s.name: {m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in s.method}
            for s in file.service
        },
        "messages": {m.name: fields(m) for m in file.message_type},
    }


@pytest.mark.parametrize(("ours", "theirs"), PAIRS, ids=["dra-v1", "pluginregistration-v1"])
def test_our_proto_matches_kubelets(ours: str, theirs: str, tmp_path: Path) -> None:
    cache = module_cache()
    if cache is None:
        pytest.skip(f"{KUBELET} is not in the Go module cache (make testenv puts it there)")
    assert shape(compile_proto(OURS / ours, tmp_path)) == shape(compile_proto(cache / theirs, tmp_path))


def test_the_comparison_sees_a_changed_field_number(tmp_path: Path) -> None:
    changed = tmp_path / "x" / "draplugin.proto"
    changed.parent.mkdir()
    changed.write_text((OURS / "draplugin.proto").read_text().replace("share_id = 5", "share_id = 6"))
    assert shape(compile_proto(changed, tmp_path)) != shape(compile_proto(OURS / "draplugin.proto", tmp_path))
