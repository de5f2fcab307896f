"""The API server's version, read once at start, and what hami chose for it (:mod:`hami.protocol.kubeversion`)."""

from __future__ import annotations

import logging

from hami.errors import ApiError
from hami.k8s.client import KubeClient
from hami.protocol.kubeversion import TESTED, ServerProfile, parse_kube_version, server_profile

__all__ = ["read_server_profile"]

log = logging.getLogger(__name__)


async def read_server_profile(client: KubeClient) -> ServerProfile | None:
    """``GET /version`` -> the profile, logged as one line (a WARNING outside the tested window). None, with a
    WARNING, when the version cannot be read or parsed: hami then acts as on a tested release."""
    try:
        profile = server_profile(parse_kube_version(await client.server_version()))
    except (ApiError, ValueError) as err:
        log.warning(
            "could not tell the API server's Kubernetes version (%s); acting as on a tested release (%s)",
            err,
            ", ".join(TESTED),
        )
        return None
    log.log(logging.INFO if profile.tested else logging.WARNING, "%s", profile.describe())
    return profile
