"""Who is calling, and may they: the API server's TokenReview and SubjectAccessReview, with a short-lived cache.

This is how controller-runtime's secure metrics (and kube-rbac-proxy) protect ``/metrics``: the caller's bearer
token is sent to the API server in a TokenReview; the user it names is then checked with a SubjectAccessReview
for a verb on a non-resource URL (``get`` on ``/metrics``), so access is granted by ordinary RBAC::

    rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]

A decision (allowed, not authenticated, forbidden) is kept for ``ttl`` seconds under a SHA-256 of the token, in
a cache of at most ``capacity`` entries (the least recently used goes first), so a scrape every few seconds
costs two API calls per token and minute, not per scrape. A failed API call is not cached.
"""

from __future__ import annotations

import enum
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from hami.k8s.client import KubeClient
from hami.k8s.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

__all__ = ["Access", "AccessReviewer", "DecisionCache", "UserInfo"]


class Access(enum.Enum):
    """The outcome of a review: the HTTP status a server answers with."""

    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403


class UserInfo(msgspec.Struct, frozen=True):
    username: str = ""
    uid: str = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}


class _TokenReviewStatus(msgspec.Struct, frozen=True):
    authenticated: bool = False
    user: UserInfo = UserInfo()
    error: str = ""


class _TokenReview(msgspec.Struct):
    status: _TokenReviewStatus = _TokenReviewStatus()


class _AccessStatus(msgspec.Struct, frozen=True):
    allowed: bool = False
    denied: bool = False
    reason: str = ""


class _SubjectAccessReview(msgspec.Struct):
    status: _AccessStatus = _AccessStatus()


@dataclass
class DecisionCache:
    """Decisions by token digest; at most ``capacity`` entries, each valid ``ttl`` seconds."""

    ttl: float = 30.0
    capacity: int = 1024
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self._entries: OrderedDict[bytes, tuple[float, Access]] = OrderedDict()

    @staticmethod
    def key(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str) -> Access | None:
        key = self.key(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, access = entry
        if self.clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return access

    def put(self, token: str, access: Access) -> None:
        key = self.key(token)
        self._entries[key] = (self.clock() + self.ttl, access)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


class AccessReviewer:
    """``check(token)``: may the holder of this bearer token ``verb`` the non-resource URL ``path``?

    Raises :class:`~hami.errors.ApiError` when the API server cannot be asked (nothing is cached then).
    """

    def __init__(self, client: KubeClient, path: str, verb: str = "get", cache: DecisionCache | None = None) -> None:
        self.client = client
        self.path = path
        self.verb = verb
        self.cache = cache if cache is not None else DecisionCache()
        self.reviews = 0
        """API calls made (TokenReviews and SubjectAccessReviews), for tests and curiosity."""

    async def check(self, token: str) -> Access:
        if not token:
            return Access.UNAUTHENTICATED
        cached = self.cache.get(token)
        if cached is not None:
            return cached
        user = await self._authenticate(token)
        if user is None:
            access = Access.UNAUTHENTICATED
        else:
            access = Access.ALLOWED if await self._authorize(user) else Access.FORBIDDEN
        self.cache.put(token, access)
        return access

    async def _authenticate(self, token: str) -> UserInfo | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        self.reviews += 1
        review = await self.client.create(TOKEN_REVIEWS, body, type=_TokenReview)
        return review.status.user if review.status.authenticated else None

    async def _authorize(self, user: UserInfo) -> bool:
        spec: dict[str, object] = {
            "user": user.username,
            "groups": user.groups,
            "nonResourceAttributes": {"path": self.path, "verb": self.verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        self.reviews += 1
        review = await self.client.create(SUBJECT_ACCESS_REVIEWS, body, type=_SubjectAccessReview)
        return review.status.allowed and not review.status.denied
