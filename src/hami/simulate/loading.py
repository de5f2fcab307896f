"""Reading snapshot and pod files: what ``kubectl get … -o json|yaml`` prints, or hand-written manifests.

A file holds one or more documents: multi-document YAML (``---``), one JSON value or several concatenated
JSON values. A document is a Node, a Pod, a ResourceQuota — or a DRA DeviceClass, ResourceSlice or ResourceClaim
(``resource.k8s.io/v1``, issue 18) — or a List of them (``List``, ``NodeList``, …, as kubectl and the API server
print them); a top-level JSON/YAML array is read like a List's ``items``.
Every object is decoded at the edge into the compact views of ``hami.protocol.objects`` with
``msgspec.convert``; anything wrong raises ``InvalidInput`` whose ``field`` names the file, the object
(position, kind, namespace/name) and, for decode failures, the field inside the object.

YAML is read without timestamp resolution (``creationTimestamp: 2024-01-01T00:00:00Z`` stays a string, as in
JSON); other YAML 1.1 conversions remain, so an unquoted ``true`` annotation value is reported, as the API
server would reject it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import msgspec
import yaml

from hami.errors import InvalidInput
from hami.protocol.dra import DeviceClass, ResourceClaim, ResourceSlice
from hami.protocol.objects import Node, Pod, ResourceQuota
from hami.simulate.fields import WORKLOAD_KINDS, unknown_fields
from hami.simulate.workloads import expand_workload

__all__ = [
    "STDIN",
    "LoadedPods",
    "Snapshot",
    "Sourced",
    "controller_of",
    "load_pods",
    "load_snapshot",
    "read_documents",
    "read_files",
    "read_pods",
    "require_nodes",
]

T = TypeVar("T")

_DRA_KINDS: Final = {"DeviceClass": DeviceClass, "ResourceSlice": ResourceSlice, "ResourceClaim": ResourceClaim}
_KINDS: Final = {"Node": Node, "Pod": Pod, "ResourceQuota": ResourceQuota, **_DRA_KINDS}
_LIST_KINDS: Final = frozenset(
    {"List", "NodeList", "PodList", "ResourceQuotaList", "DeviceClassList", "ResourceSliceList", "ResourceClaimList"}
    | {f"{kind}List" for kind in WORKLOAD_KINDS}
)

_YamlBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_YamlBase):  # type: ignore[misc]
    """SafeLoader without the timestamp resolver: Kubernetes timestamps stay strings, as in JSON."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _YamlBase.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True, slots=True)
class Sourced(Generic[T]):
    """A decoded object and where it came from (``origin``: ``"<file>: <position> (<Kind> <ns>/<name>)"``)."""

    obj: T
    file: str
    origin: str
    raw: dict[str, Any] | None = None
    """The object as written (what the API server would send the admission webhook); None when not kept."""
    node: str | None = None
    """The node the pod's controller binds it to (a DaemonSet's pod); None: any candidate node."""
    warnings: tuple[str, ...] = ()
    """What reading the pod's object found wrong (``unknown field`` of the Pod, or of the workload that makes it)."""
    controller: tuple[str, str] | None = None
    """The ``(kind, name)`` of the object's controlling owner (``ownerReferences`` with ``controller: true``):
    what recreates a snapshot's pod once it is deleted (``hami simulate --defrag``); None: no controller."""


@dataclass(frozen=True, slots=True)
class LoadedPods:
    """The pods to place, in file then document order (workloads expanded), and what their files got wrong
    that did not stop the reading: ``unknown field`` warnings, workloads that make no pod."""

    pods: list[Sourced[Pod]]
    warnings: list[str]
    notes: list[str] = field(default_factory=list)
    """What was read and left alone, which is no mistake: objects that make no pod (a Service, a ConfigMap)."""


@dataclass(slots=True)
class Snapshot:
    """The cluster objects of one or more snapshot files, in file order."""

    nodes: list[Sourced[Node]] = field(default_factory=list)
    pods: list[Sourced[Pod]] = field(default_factory=list)
    quotas: list[Sourced[ResourceQuota]] = field(default_factory=list)
    classes: list[Sourced[DeviceClass]] = field(default_factory=list)
    slices: list[Sourced[ResourceSlice]] = field(default_factory=list)
    claims: list[Sourced[ResourceClaim]] = field(default_factory=list)


STDIN: Final = "-"
"""The file name that stands for standard input (``helm template app | hami simulate -``)."""
STDIN_LABEL: Final = "<stdin>"


def _read_text(path: Path, label: str) -> str:
    try:
        data = sys.stdin.buffer.read() if str(path) == STDIN else path.read_bytes()
    except OSError as err:
        raise InvalidInput(label, str(path), f"cannot read the file: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        byte = data[err.start : err.start + 1].hex()
        raise InvalidInput(
            label,
            None,
            f"not a text file (byte 0x{byte} at offset {err.start} is not UTF-8): give a YAML or JSON manifest, "
            "as `kubectl get -o yaml` or `helm template` print",
        ) from None


def _json_documents(text: str, label: str) -> Iterator[object]:
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise InvalidInput(label, text[err.pos : err.pos + 40], f"not valid JSON: {err}") from None
        yield value


def read_documents(text: str, label: str) -> list[object]:
    """The documents of a file's text: concatenated JSON values, or multi-document YAML. Empty ones dropped."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return list(_json_documents(text, label))
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))  # a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise InvalidInput(label, line, f"not valid YAML{where}: {problem}") from None
    return [d for d in docs if d is not None]


def _describe(raw: dict[str, Any]) -> str:
    kind = raw.get("kind")
    meta = raw.get("metadata")
    name = ns = None
    if isinstance(meta, dict):
        name, ns = meta.get("name"), meta.get("namespace")
    who = f"{ns}/{name}" if ns else f"{name}" if name else "(no name)"
    return f"{kind if isinstance(kind, str) else '(no kind)'} {who}"


def _decode_error_field(err: msgspec.ValidationError) -> tuple[str, str]:
    """Split msgspec's ``"<reason> - at `$.a.b`"`` into ``("a.b", "<reason>")``."""
    text = str(err)
    reason, sep, where = text.rpartition(" - at `")
    if not sep:
        return "", text
    path = where.rstrip("`").removeprefix("$").removeprefix(".")
    return path, reason


def _objects(docs: Sequence[object], label: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Flatten documents and Lists into ``(position, object)`` pairs; positions read ``document 2`` or
    ``document 1 items[3]``."""
    for d, doc in enumerate(docs, start=1):
        where = f"document {d}" if len(docs) > 1 else ""
        if isinstance(doc, list):
            items: object = doc
            prefix = f"{where} " if where else ""
        elif isinstance(doc, dict) and doc.get("kind") in _LIST_KINDS:
            items = doc.get("items") or []
            prefix = f"{where} " if where else ""
        else:
            yield _checked(doc, where or "document 1", label)
            continue
        if not isinstance(items, list):
            raise InvalidInput(f"{label}: {where or 'document 1'}", items, "a List's items must be an array")
        for i, item in enumerate(items):
            yield _checked(item, f"{prefix}items[{i}]", label)


def _checked(raw: object, where: str, label: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{label}: {where}", raw, "expected a Kubernetes object (a mapping with a kind)")
    return where, raw


def _decode(raw: dict[str, Any], kind_type: type[T], where: str, label: str, keep: bool = False) -> Sourced[T]:
    origin = f"{label}: {where} ({_describe(raw)})"
    try:
        obj = msgspec.convert(raw, type=kind_type)
    except msgspec.ValidationError as err:
        path, reason = _decode_error_field(err)
        path, value = _locate(raw, path, reason)
        raise InvalidInput(f"{origin}: {path or '(object)'}", value, reason) from None
    return Sourced(obj, label, origin, raw if keep else None, controller=controller_of(raw))


def controller_of(raw: dict[str, Any]) -> tuple[str, str] | None:
    """The ``(kind, name)`` of the owner reference marked ``controller: true`` in ``raw``'s metadata, if any."""
    meta = raw.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            return str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def _json_type(value: object) -> str:
    """The type name msgspec uses in its messages (``got `bool```)."""
    if value is None:
        return "null"
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _locate(raw: object, path: str, reason: str) -> tuple[str, object]:
    """The value at a msgspec path like ``spec.containers[0].resources.limits[...]``, and the path with
    ``[...]`` (msgspec's "some key of this map") replaced by the first key whose value has the type the
    message complains about (``got `bool```). Best effort, for error messages only."""
    got = reason.rpartition("got `")[2].rstrip("`")
    value = raw
    shown: list[str] = []
    for part in re.findall(r"\[[^\]]*\]|[^.\[]+", path):
        index = part[1:-1]
        if part == "[...]" and isinstance(value, dict) and shown:
            key = next((k for k, v in value.items() if _json_type(v) == got), None)
            if key is None:
                return path, None
            shown[-1] += f"[{key}]"
            value = value[key]
        elif part.startswith("[") and index.isdigit() and isinstance(value, list) and int(index) < len(value) and shown:
            shown[-1] += part
            value = value[int(index)]
        elif isinstance(value, dict) and not part.startswith("["):
            shown.append(part)
            value = value.get(part)
        else:
            return path, None
    return ".".join(shown), value


def _load(
    text: str, label: str, allowed: frozenset[str], what: str, keep: bool = False
) -> Iterator[tuple[str, Sourced[Any]]]:
    for where, raw in _objects(read_documents(text, label), label):
        kind = raw.get("kind")
        if kind not in allowed:
            expected = ", ".join(sorted(allowed))
            raise InvalidInput(
                f"{label}: {where} ({_describe(raw)})", kind, f"unknown kind in {what}; expected {expected} or a List"
            )
        yield kind, _decode(raw, _KINDS[kind], where, label, keep)


def read_files(paths: Sequence[Path]) -> list[tuple[str, str]]:
    """``(label, text)`` for each file, the label being the path as given (``<stdin>`` for ``-``, read from
    standard input); raises ``InvalidInput``."""
    out = []
    for path in paths:
        label = STDIN_LABEL if str(path) == STDIN else str(path)
        out.append((label, _read_text(path, label)))
    return out


def load_snapshot(sources: Sequence[tuple[str, str]]) -> Snapshot:
    """Decode snapshot files given as ``(label, text)``: Nodes, Pods, ResourceQuotas, DeviceClasses,
    ResourceSlices, ResourceClaims and Lists of them.

    Raises ``InvalidInput`` naming the file and the object.
    """
    snap = Snapshot()
    lists: dict[str, list[Any]] = {
        "Node": snap.nodes,
        "Pod": snap.pods,
        "ResourceQuota": snap.quotas,
        "DeviceClass": snap.classes,
        "ResourceSlice": snap.slices,
        "ResourceClaim": snap.claims,
    }
    for label, text in sources:
        for kind, item in _load(text, label, frozenset(_KINDS), "a snapshot"):
            lists[kind].append(item)
    return snap


def load_pods(sources: Sequence[tuple[str, str]], nodes: Sequence[Node] = (), now: int = 0) -> list[Sourced[Pod]]:
    """The pods of ``read_pods`` (its warnings dropped)."""
    return read_pods(sources, nodes, now).pods


_POD_KINDS: Final = frozenset({"Pod", *WORKLOAD_KINDS})


def read_pods(
    sources: Sequence[tuple[str, str]], nodes: Sequence[Node] = (), now: int = 0, namespace: str = ""
) -> LoadedPods:
    """Decode the pods to place, given as ``(label, text)``: Pods, and workloads (``WORKLOAD_KINDS``) expanded
    into the pods their controllers make (``hami.simulate.workloads``; ``nodes`` for DaemonSets, ``now`` names a
    CronJob's run). An object that names no namespace goes to ``namespace`` when given (``kubectl apply -f``'s
    habit: the context's). Each keeps its raw object for admission. Fields Kubernetes does not define are warnings, as
    ``kubectl --validate=warn`` gives them; an object of another kind (a Service, a ConfigMap: what ``helm template``
    prints beside its workloads) is skipped with a note. Raises ``InvalidInput`` naming the file and the object,
    and for a file that holds no object at all."""
    loaded = LoadedPods([], [])
    for label, text in sources:
        objects = list(_objects(read_documents(text, label), label))
        if not objects:
            raise InvalidInput(label, None, _EMPTY)
        for where, written in objects:
            _read_pod_object(loaded, label, where, _in_namespace(written, namespace), nodes, now)
    return loaded


_EMPTY: Final = (
    "holds no Kubernetes object (an empty file, or only comments): give Pods or workloads (Deployment, Job, ...) "
    "as YAML or JSON"
)


def _read_pod_object(
    loaded: LoadedPods, label: str, where: str, raw: dict[str, Any], nodes: Sequence[Node], now: int
) -> None:
    """Add the pods one object of a pods file makes to ``loaded``: a Pod, a workload's pods, or a note that an
    object of another kind (a Service) places none."""
    kind = raw.get("kind")
    origin = f"{label}: {where} ({_describe(raw)})"
    if not isinstance(kind, str) or not kind:
        workloads = ", ".join(sorted(WORKLOAD_KINDS))
        reason = f"no kind; expected Pod, a workload ({workloads}) or a List"
        raise InvalidInput(origin, kind, reason)
    if kind not in _POD_KINDS:
        loaded.notes.append(f"{origin}: skipped, a {kind} makes no pod")
        return
    unknown = tuple(f"{origin}: {problem}" for problem in unknown_fields(raw))
    loaded.warnings.extend(unknown)
    if kind == "Pod":
        item = _decode(raw, Pod, where, label, keep=True)
        loaded.pods.append(Sourced(item.obj, label, item.origin, item.raw, None, unknown))
        return
    made = expand_workload(raw, origin, nodes, now)
    if not made:
        loaded.warnings.append(f"{origin}: makes no pod now (replicas 0, suspended, or no node matches)")
    for i, pod in enumerate(made):
        item = _decode(pod.raw, Pod, f"{where} ({_describe(raw)}) pod {i + 1} of {len(made)}", label, True)
        loaded.pods.append(Sourced(item.obj, label, item.origin, item.raw, pod.node, unknown))


def _in_namespace(raw: dict[str, Any], namespace: str) -> dict[str, Any]:
    """``raw`` with ``metadata.namespace`` set to ``namespace`` when it names none (a copy; ``raw`` is left alone)."""
    meta = raw.get("metadata")
    if not namespace or (isinstance(meta, dict) and meta.get("namespace")) or not isinstance(meta, dict | None):
        return raw
    return {**raw, "metadata": {**(meta or {}), "namespace": namespace}}


_SNAPSHOT_HINT: Final = "a snapshot is what `kubectl get nodes,pods,resourcequotas -A -o json` prints"


def require_nodes(snap: Snapshot, labels: Sequence[str]) -> None:
    """Refuse a snapshot without a Node: nothing could be placed on it, so it is a mistake (an empty file,
    ``[]``, or the pods file given as the snapshot). Raises ``InvalidInput`` naming the files."""
    if snap.nodes:
        return
    where = ", ".join(labels) or "--snapshot"
    if snap.pods:
        pods = len(snap.pods)
        reason = (
            f"holds {pods} pod{'s' if pods != 1 else ''} but no Node; is this the pods file? Give the cluster with "
            f"--snapshot and the pods to place as arguments ({_SNAPSHOT_HINT})"
        )
    elif snap.quotas:
        reason = f"holds ResourceQuotas but no Node ({_SNAPSHOT_HINT})"
    else:
        reason = f"holds no Kubernetes object ({_SNAPSHOT_HINT})"
    raise InvalidInput(where, None, f"the snapshot {reason}")
