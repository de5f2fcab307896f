"""``hami simulate --template-node FILE``: "would new nodes of this group take these pods, and how many?".

The operator's side of Cluster Autoscaler's question (docs/autoscaler.md), answered with the code the extender
answers the autoscaler with (``hami.scheduling.simulation``): the template Node (a Node manifest, with the group's
registration annotations, or only its group label when a device profile stands for the group: ``--device-profiles``)
is copied as often as the pods need, each pod placed on the best copy that takes it, a copy added when none does but
an empty one would. Pods go through the admission webhook's decision first, as ``hami simulate`` places them.

Also :func:`load_device_profiles`, the reader of a mounted profiles ConfigMap, shared with ``hami scheduler``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from hami.config.profiles import DEFAULT_PROFILE_LABEL, DeviceProfiles
from hami.errors import ConfigError, HamiError, InvalidInput
from hami.protocol.objects import Node, Pod
from hami.scheduling.request import PodRequest, SchedulingDefaults, prefilter
from hami.scheduling.simulation import Estimate, estimate, simulated_reason
from hami.simulate.devconfig import Families, device_config_from_text
from hami.simulate.loading import Sourced, load_snapshot, read_files, read_pods
from hami.simulate.simulator import Outcome, Simulator

__all__ = ["ScaleUpOptions", "load_device_profiles", "run_scaleup"]


def load_device_profiles(directory: str | None, label: str = DEFAULT_PROFILE_LABEL) -> DeviceProfiles | None:
    """The profiles in ``directory`` (a mounted ConfigMap: each regular file not starting with ``.`` is one group;
    the ``..data`` links the kubelet makes are skipped); None without one. ``ConfigError`` naming the directory or
    the group when one cannot be read."""
    if not directory:
        return None
    root = Path(directory)
    try:
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(root.iterdir()) if _profile_file(p)}
    except OSError as err:
        raise ConfigError("--device-profiles", directory, f"cannot read it: {err.strerror}") from None
    return DeviceProfiles.parse(files, label)


def _profile_file(path: Path) -> bool:
    return not path.name.startswith(".") and path.is_file()


@dataclass(frozen=True, slots=True)
class ScaleUpOptions:
    template: Path
    pods: Sequence[Path] = ()
    profiles: str | None = None
    profile_label: str = DEFAULT_PROFILE_LABEL
    config: Path | None = None
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    output: Literal["table", "json"] = "table"
    now: int = 0
    max_nodes: int = 100
    families: Families = field(default_factory=Families)


def run_scaleup(opts: ScaleUpOptions, out: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Answer for ``opts``; 0 when every pod fits a new node, 3 when some fits none, 1 on unreadable input."""
    try:
        config_text = read_files([opts.config])[0][1] if opts.config is not None else None
        config, warnings = device_config_from_text(config_text, str(opts.config))
        template = _template(opts.template)
        profiles = load_device_profiles(opts.profiles, opts.profile_label)
        loaded = read_pods(read_files(opts.pods), [template], opts.now)
    except (HamiError, OSError) as error:
        err(f"error: {error}")
        return 1
    defaults = SchedulingDefaults(node_policy=opts.node_policy, gpu_policy=opts.gpu_policy)
    sim = Simulator(config, defaults, admission=True, families=opts.families.enabled())
    requests, refused = _requests(sim, loaded.pods)
    answer = estimate(sim.vendors, template, [r for _, r in requests], opts.now, profiles, max_nodes=opts.max_nodes)
    for warning in [*warnings, *loaded.warnings, *sim.warnings]:
        err(f"warning: {warning}")
    rows = _rows(requests, answer, refused)
    if opts.output == "json":
        out(json.dumps({"template": template.metadata.name, "newNodes": list(answer.copies), "pods": rows}, indent=2))
    else:
        out(_table(template.metadata.name, answer, rows))
    return 0 if all(row["node"] for row in rows) else 3


def _template(path: Path) -> Node:
    snap = load_snapshot(read_files([path]))
    if len(snap.nodes) != 1 or snap.pods or snap.quotas:
        raise InvalidInput(str(path), f"{len(snap.nodes)} nodes", "expected one Node: the node group's template")
    node = snap.nodes[0].obj
    if not node.metadata.name:
        raise InvalidInput(f"{path}: metadata.name", "", "the template node needs a name")
    return node


def _requests(sim: Simulator, pods: Sequence[Sourced[Pod]]) -> tuple[list[tuple[str, PodRequest]], dict[str, str]]:
    """Each pod admitted and read, in order; those refused (denied, invalid, asking for no device) with why."""
    requests: list[tuple[str, PodRequest]] = []
    refused: dict[str, str] = {}
    for i, item in enumerate(pods):
        admitted = sim.admit(item)
        if isinstance(admitted, Outcome):
            refused[admitted.pod] = admitted.message
            continue
        pod = admitted.pod
        key = f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
        try:
            req = prefilter(_identified(pod, f"scale-up-{i}"), sim.vendors, sim.defaults)
        except InvalidInput as error:
            refused[key] = f"{item.origin}: {error}"
            continue
        if not req.wants_devices:
            refused[key] = "asks for no device hami manages: any new node of the group takes it as far as hami goes"
            continue
        requests.append((key, req))
    return requests, refused


def _identified(pod: Pod, uid: str) -> Pod:
    if pod.metadata.uid:
        return pod
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, uid=uid))


def _rows(requests: list[tuple[str, PodRequest]], answer: Estimate, refused: dict[str, str]) -> list[dict[str, str]]:
    rows = []
    for (key, _), node, decision in zip(requests, answer.placed, answer.decisions, strict=True):
        why = "; ".join(simulated_reason(r) for _, r in sorted(decision.rejected.items()))
        rows.append({"pod": key, "node": node or "", "reason": "" if node else why})
    rows += [{"pod": key, "node": "", "reason": why} for key, why in refused.items()]
    return rows


def _table(template: str, answer: Estimate, rows: list[dict[str, str]]) -> str:
    taken = sum(1 for row in rows if row["node"])
    lines = [f"{len(answer.copies)} new node(s) like {template} take {taken} of {len(rows)} pod(s)", ""]
    width = max([len(row["pod"]) for row in rows] + [3])
    lines += [f"{'POD':<{width}}  NEW NODE"]
    for row in rows:
        lines.append(f"{row['pod']:<{width}}  {row['node'] or 'none: ' + row['reason']}")
    return "\n".join(lines)
