"""Kubernetes I/O: configuration, an async API client, list+watch caches, the cluster seam, node lock, events.

Modules, from the wire up: ``config`` (kubeconfig / in-cluster), ``ratelimit``, ``resources``, ``records``
(envelopes, Lease, Event), ``client`` (:class:`KubeClient`), ``tasks`` (:class:`Supervisor`), ``watch``
(:class:`Reflector`), ``cluster`` (:class:`ClusterClient` and :class:`KubeCluster`), ``memory``
(:class:`MemoryCluster`), ``nodelock`` (:class:`NodeLocker`), ``events`` (:class:`EventRecorder`),
``extender_io`` (:class:`ExtenderIO`: the scheduling cycle's port, assembled from the three before).
"""

from hami.k8s.client import ClientSettings, KubeClient, ListPage, PatchType, WatchEvent, api_error
from hami.k8s.cluster import ClusterClient, KubeCluster, WallClock, utc_now
from hami.k8s.config import KubeConfig, load_config, load_incluster_config, load_kubeconfig
from hami.k8s.events import EventRecorder, EventStats
from hami.k8s.extender_io import ExtenderIO
from hami.k8s.memory import MemoryCluster, RecordedEvent
from hami.k8s.nodelock import NodeLocker
from hami.k8s.ratelimit import TokenBucket
from hami.k8s.records import EventType, Lease, ObjectRef
from hami.k8s.resources import EVENTS, LEASES, NODES, PODS, RESOURCE_QUOTAS, Resource
from hami.k8s.tasks import Supervisor
from hami.k8s.watch import Callbacks, EventHandler, Reflector, WatchSettings

__all__ = [
    "EVENTS",
    "LEASES",
    "NODES",
    "PODS",
    "RESOURCE_QUOTAS",
    "Callbacks",
    "ClientSettings",
    "ClusterClient",
    "EventHandler",
    "EventRecorder",
    "EventStats",
    "EventType",
    "ExtenderIO",
    "KubeClient",
    "KubeCluster",
    "KubeConfig",
    "Lease",
    "ListPage",
    "MemoryCluster",
    "NodeLocker",
    "ObjectRef",
    "PatchType",
    "RecordedEvent",
    "Reflector",
    "Resource",
    "Supervisor",
    "TokenBucket",
    "WallClock",
    "WatchEvent",
    "WatchSettings",
    "api_error",
    "load_config",
    "load_incluster_config",
    "load_kubeconfig",
    "utc_now",
]
