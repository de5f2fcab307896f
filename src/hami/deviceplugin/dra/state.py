"""Prepare and unprepare: the claim's CDI spec, its HAMi-core directory and the checkpoint, kept consistent.

:class:`ClaimStore` is the one writer of those files. Every method blocks (file I/O) and holds one lock, so
concurrent kubelet calls for the same claim run one after the other. Prepare is idempotent: a claim already
prepared gets the same answer (its files rewritten if something removed them) without a second cache file or
directory; unprepare of an unknown claim is a no-op that still removes leftovers by name. A claim reserved for
several pods is prepared once and shared: every consumer's containers map the same HAMi-core cache, so the claim's
limits bind all of them together, which is what the claim booked.
"""

from __future__ import annotations

import logging
import shutil
import threading
import uuid as uuidlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hami.deviceplugin.cdi import write_spec
from hami.deviceplugin.dra import checkpoint
from hami.deviceplugin.dra.claims import (
    ClaimPlan,
    cdi_device_id,
    claim_dir,
    claim_env,
    claim_spec,
    plan_claim,
    spec_file_name,
)
from hami.deviceplugin.dra.slices import SliceDevice
from hami.deviceplugin.response import HostFiles
from hami.protocol.dra import ResourceClaim

__all__ = ["ClaimStore", "PreparedDevice", "StoreOptions"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One entry of kubelet's answer (``dra.v1.Device``)."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Where files go and what the containers get. ``device_nodes=False`` with a fake NVML (no ``/dev`` nodes)."""

    plugin_dir: Path
    cdi_dir: Path
    host: HostFiles
    device_nodes: bool = True
    log_level: int | None = None
    no_core_limit: bool = False


def _devices_of(plan: ClaimPlan) -> list[PreparedDevice]:
    return [
        PreparedDevice(
            requests=share.requests,
            pool=plan.pool,
            device=share.device,
            cdi_ids=(cdi_device_id(plan.uid, share.device),),
            share_id=share.share_id,
        )
        for share in plan.shares
    ]


def _from_record(record: Mapping[str, Any]) -> list[PreparedDevice]:
    return [
        PreparedDevice(
            requests=tuple(d["requests"]),
            pool=d["pool"],
            device=d["device"],
            cdi_ids=tuple(d["cdi_ids"]),
            share_id=d.get("share_id"),
        )
        for d in record["devices"]
    ]


class ClaimStore:
    """The node's prepared claims (module docstring). Raises ``CheckpointError`` when the checkpoint is unusable."""

    def __init__(self, options: StoreOptions, new_cache_id: Callable[[], str] = lambda: str(uuidlib.uuid4())) -> None:
        self._options = options
        self._new_cache_id = new_cache_id
        self._path = options.plugin_dir / checkpoint.FILE_NAME
        self._lock = threading.Lock()
        self._claims = checkpoint.load(self._path)

    def prepared(self) -> dict[str, str]:
        """Claim UID → state, for tests and logs."""
        with self._lock:
            return {uid: str(record["state"]) for uid, record in self._claims.items()}

    def entries(self) -> dict[str, tuple[str, str]]:
        """Claim UID → (namespace, name) of every claim in the checkpoint (for the clean-up of claims gone from
        the API)."""
        with self._lock:
            return {uid: (str(record["namespace"]), str(record["name"])) for uid, record in self._claims.items()}

    def prepare(self, claim: ResourceClaim, pool: str, devices: Mapping[str, SliceDevice]) -> list[PreparedDevice]:
        """Prepare ``claim`` (already read from the API) on this node. Raises ``PrepareRefused`` or ``OSError``."""
        uid = claim.metadata.uid
        with self._lock:
            record = self._claims.get(uid)
            if record is not None and record["state"] == checkpoint.COMPLETED:
                self._write_files(uid, record["spec"])
                return _from_record(record)
            plan = plan_claim(claim, pool, devices)
            cache = f"{self._new_cache_id()}.cache"
            options = self._options
            env = claim_env(plan, options.host, cache, log_level=options.log_level, no_core_limit=options.no_core_limit)
            spec = claim_spec(plan, options.host, cache, device_nodes=options.device_nodes, env=env)
            prepared = _devices_of(plan)
            record = {
                "state": checkpoint.STARTED,
                "namespace": plan.namespace,
                "name": plan.name,
                "spec": spec,
                "devices": [asdict(d) for d in prepared],
            }
            self._commit(uid, record)
            self._write_files(uid, spec, fresh=True)
            self._commit(uid, {**record, "state": checkpoint.COMPLETED})
            log.info("prepared claim %s/%s (%s): %s", plan.namespace, plan.name, uid, [c.device for c in plan.cards])
            return prepared

    def unprepare(self, uid: str) -> bool:
        """Remove the claim's spec, directory and checkpoint entry; returns whether it was prepared."""
        with self._lock:
            known = uid in self._claims
            (self._options.cdi_dir / spec_file_name(uid)).unlink(missing_ok=True)
            shutil.rmtree(self._host_dir(uid), ignore_errors=True)
            if known:
                remaining = {k: v for k, v in self._claims.items() if k != uid}
                checkpoint.save(self._path, remaining)
                self._claims = remaining
                log.info("unprepared claim %s", uid)
            return known

    def _commit(self, uid: str, record: dict[str, Any]) -> None:
        claims = {**self._claims, uid: record}
        checkpoint.save(self._path, claims)
        self._claims = claims

    def _host_dir(self, uid: str) -> Path:
        return self._options.host.on_host(claim_dir(self._options.host, uid))

    def _write_files(self, uid: str, spec: Mapping[str, Any], *, fresh: bool = False) -> None:
        """The claim's directory (mode 0777: the container's user writes its cache there) and its CDI spec.
        ``fresh`` empties the directory first (a crash between STARTED and COMPLETED may have left files)."""
        directory = self._host_dir(uid)
        if fresh:
            shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
        write_spec(self._options.cdi_dir, spec_file_name(uid), spec)
