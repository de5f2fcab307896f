"""The chart's identities on the test control plane, so that end-to-end tests run hami, kube-scheduler and the
device plugin with exactly the rights the chart gives them.

``chart_identities(plane)`` renders the chart (``helm template``, release ``hami`` in ``hami-system``), applies
its ServiceAccounts, (Cluster)Roles, (Cluster)RoleBindings and ValidatingAdmissionPolicies to the control plane
once per plane, waits until the device plugin's policy is in effect, and hands out kubeconfigs whose bearer
token the TokenRequest API minted for one of those ServiceAccounts (no kubelet or token controller runs here):

* ``kubeconfig(HAMI_SA)`` / ``kubeconfig(KUBE_SCHEDULER_SA)``: hami's and the kube-scheduler sidecar's identities;
* ``device_plugin(node)``: a context manager that creates a stand-in for the plugin's DaemonSet pod bound to
  ``node`` (spec.nodeName) and yields a kubeconfig with a token bound to that pod, so the token carries the
  node's name as the kubelet's projected token does; the pod (and so the token) is deleted afterwards;
* ``tenant(namespace)``: a client for a tenant of ``namespace`` (a ServiceAccount there that may create, update
  and delete pods in it, nothing else), the identity the chart's allocation policy holds back.

Cluster-scoped objects are shared by the whole session; the chart names its ServiceAccounts after the release,
so nothing here collides with test objects.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.e2e.cluster import ApiError, ControlPlane, KubeClient, _write_kubeconfig, wait_until
from tests.helm import template

RELEASE_NAMESPACE: Final = "hami-system"
HAMI_SA: Final = "hami-scheduler"
KUBE_SCHEDULER_SA: Final = "hami-kube-scheduler"
DEVICE_PLUGIN_SA: Final = "hami-device-plugin"
CERTS_SA: Final = "hami-certs"
TOKEN_SECONDS: Final = 6 * 3600  # longer than any test session: the kubeconfigs carry the token inline

# kind -> (API prefix, plural, namespaced): the objects that make up the chart's identities and their rights
IDENTITY_KINDS: Final = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
}


def object_path(obj: dict[str, Any], namespace: str) -> tuple[str, str]:
    """(collection path, object path) of a chart object of one of ``IDENTITY_KINDS``."""
    prefix, plural, namespaced = IDENTITY_KINDS[obj["kind"]]
    collection = f"{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"{prefix}/{plural}"
    return collection, f"{collection}/{obj['metadata']['name']}"


def apply(kube: KubeClient, obj: dict[str, Any], namespace: str) -> None:
    """Create ``obj``, or replace it when it exists (a second control plane in one session, a re-run). An object
    that names its own namespace (the chart's RoleBinding in kube-system) goes there."""
    collection, path = object_path(obj, obj["metadata"].get("namespace") or namespace)
    try:
        kube.post(collection, obj)
    except ApiError as err:
        if err.status != 409:
            raise
        current = kube.get(path)
        kube.put(
            path, {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
        )


@dataclass
class ChartIdentities:
    """The chart's identities applied to ``plane`` (see the module docstring)."""

    plane: ControlPlane
    docs: list[dict[str, Any]]
    """Every object the chart renders with its default values (only the identities are applied)."""
    namespace: str = RELEASE_NAMESPACE
    _kubeconfigs: dict[str, Path] = field(default_factory=dict)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [d for d in self.objects(kind) if d["metadata"]["name"] == name]
        return found

    def token(self, service_account: str, bound_pod: dict[str, Any] | None = None) -> str:
        """A token for ``service_account`` from the TokenRequest API, bound to ``bound_pod`` when given."""
        spec: dict[str, Any] = {"expirationSeconds": TOKEN_SECONDS}
        if bound_pod is not None:
            meta = bound_pod["metadata"]
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        with self.plane.client() as kube:
            path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{service_account}/token"
            answer = kube.post(path, body)
        token: str = answer["status"]["token"]
        return token

    def write_kubeconfig(self, name: str, token: str) -> Path:
        path = self.plane.workdir / "identities" / f"{name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        _write_kubeconfig(path, self.plane.server, self.plane.ca_pem, token)
        return path

    def kubeconfig(self, service_account: str) -> Path:
        """A kubeconfig for ``service_account`` (one token per ServiceAccount and plane, not bound to a pod)."""
        if service_account not in self._kubeconfigs:
            token = self.token(service_account)
            self._kubeconfigs[service_account] = self.write_kubeconfig(service_account, token)
        return self._kubeconfigs[service_account]

    def client(self, token: str) -> KubeClient:
        return KubeClient(self.plane.server, self.plane.ca_file, token)

    @contextlib.contextmanager
    def device_plugin_pod(self, node: str) -> Iterator[dict[str, Any]]:
        """A stand-in for the plugin's DaemonSet pod on ``node`` (never runs: there is no kubelet)."""
        name = f"{DEVICE_PLUGIN_SA}-{uuid.uuid4().hex[:8]}"
        with self.plane.client() as kube:
            pod = kube.create_pod(
                self.namespace,
                name,
                node_name=node,
                labels={"app.kubernetes.io/component": "hami-device-plugin"},
                spec={"serviceAccountName": DEVICE_PLUGIN_SA},
            )
            try:
                yield pod
            finally:
                kube.delete_pod(self.namespace, name)

    @contextlib.contextmanager
    def device_plugin(self, node: str) -> Iterator[Path]:
        """A kubeconfig for the device plugin on ``node``: its token is bound to a pod on that node."""
        with self.device_plugin_pod(node) as pod:
            yield self.write_kubeconfig(f"{DEVICE_PLUGIN_SA}-{node}", self.token(DEVICE_PLUGIN_SA, bound_pod=pod))

    @contextlib.contextmanager
    def tenant(self, namespace: str) -> Iterator[KubeClient]:
        """A client for a tenant of ``namespace``: a ServiceAccount there with a Role to create, read, update and
        delete pods in it (what a namespace's user has; the API server's ``edit`` role is empty here, filled in
        only by a controller that does not run)."""
        name = f"hami-e2e-tenant-{uuid.uuid4().hex[:8]}"
        rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "update", "patch"]}]
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        with self.plane.client() as kube:
            kube.post(
                f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
            )
            kube.post(
                f"{rbac}/namespaces/{namespace}/roles",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": name},
                    "rules": rules,
                },
            )
            kube.post(
                f"{rbac}/namespaces/{namespace}/rolebindings",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                },
            )
            body = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            }
            token = kube.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body)["status"]["token"]
            try:
                with self.client(token) as tenant:
                    yield tenant
            finally:
                for path in (
                    f"{rbac}/namespaces/{namespace}/rolebindings/{name}",
                    f"{rbac}/namespaces/{namespace}/roles/{name}",
                ):
                    kube.delete(path)
                kube.delete(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}")


_APPLIED: dict[Path, ChartIdentities] = {}


def chart_identities(plane: ControlPlane, sets: tuple[str, ...] = ()) -> ChartIdentities:
    """The chart's identities on ``plane``, applied on first use (see the module docstring); ``sets`` are the
    chart values they are rendered with (``draMode.enabled=true``: DRA mode's rights), on the plane's first use."""
    if plane.workdir in _APPLIED:
        return _APPLIED[plane.workdir]
    with plane.client() as kube:
        version = kube.get("/version")["gitVersion"].lstrip("v").split("-")[0]
        docs = template(RELEASE_NAMESPACE, version, *sets)
        try:
            kube.create_namespace(RELEASE_NAMESPACE)
        except ApiError as err:
            if err.status != 409:
                raise
        for obj in docs:
            if obj["kind"] in IDENTITY_KINDS:
                apply(kube, obj, RELEASE_NAMESPACE)
        identities = ChartIdentities(plane, docs)
        _wait_for_node_restriction(kube, identities)
        _wait_for_allocation_policy(kube, identities)
    _APPLIED[plane.workdir] = identities
    return identities


def _wait_for_node_restriction(kube: KubeClient, identities: ChartIdentities) -> None:
    """A new policy reaches the API server's admission chain a moment after it is written: wait until the device
    plugin's policy refuses a write with a token that names no node (RBAC alone would allow it)."""
    probe = f"hami-e2e-policy-probe-{uuid.uuid4().hex[:8]}"
    kube.create_node(probe)
    try:
        with identities.client(identities.token(DEVICE_PLUGIN_SA)) as plugin:

            def refused() -> bool:
                try:
                    plugin.patch(f"/api/v1/nodes/{probe}", {"metadata": {"annotations": {"hami.io/probe": "x"}}})
                except ApiError as err:
                    return err.status in (403, 422) and "carries no node name" in str(err)
                return False

            wait_until(refused, interval=0.25, description="the device plugin's ValidatingAdmissionPolicy")
    finally:
        kube.delete_node(probe)


def _wait_for_allocation_policy(kube: KubeClient, identities: ChartIdentities) -> None:
    """As ``_wait_for_node_restriction``, for the scheduler's allocation policy: wait until a tenant's pod that
    carries ``hami.io/vgpu-node`` is refused (RBAC alone would allow it)."""
    namespace = kube.create_namespace()
    try:
        with identities.tenant(namespace) as tenant:

            def refused() -> bool:
                try:
                    tenant.create_pod(namespace, "probe", annotations={"hami.io/vgpu-node": "probe"})
                except ApiError as err:
                    return err.status in (403, 422) and "may not write hami.io/vgpu-node" in str(err)
                kube.delete_pod(namespace, "probe")
                return False

            wait_until(refused, interval=0.25, description="the scheduler's allocation ValidatingAdmissionPolicy")
    finally:
        kube.delete(f"/api/v1/namespaces/{namespace}")
