"""The names DRA mode gives a pod's claims (pure; DRAMODE.md).

* the pod's own name for a claim (``spec.resourceClaims[].name``, a DNS label): ``hami-<container>``;
* the ResourceClaim object's name: ``<base>-<container>-<5 random characters>``, where ``base`` is the pod's name,
  or its ``generateName`` without the trailing ``-`` (at admission a ``generateName`` pod has no name yet, so a
  name built from it alone would collide between the pod's siblings: HAMi-DRA's defect). The random characters come
  from the caller (Kubernetes' own alphabet for generated names, without vowels), so this stays pure.

Either name longer than allowed (63 characters) is cut and ends with 8 hex digits of a SHA-256 of the whole, so
two long names that share their beginning still differ.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["MAX_NAME", "POD_CLAIM_PREFIX", "SUFFIX_ALPHABET", "SUFFIX_LENGTH", "claim_name", "pod_claim_name"]

MAX_NAME: Final = 63
POD_CLAIM_PREFIX: Final = "hami-"
SUFFIX_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH: Final = 5
_HASH: Final = 8


def _fit(name: str, limit: int) -> str:
    """``name`` when it fits in ``limit`` characters, else its start and a hash of the whole."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    head = name[: limit - _HASH - 1].rstrip("-.")
    return f"{head}-{digest}"


def pod_claim_name(container: str) -> str:
    """``hami-<container>``, at most 63 characters (a DNS label)."""
    return _fit(POD_CLAIM_PREFIX + container, MAX_NAME)


def claim_name(pod_name: str, generate_name: str, container: str, suffix: str) -> str:
    """The ResourceClaim's name for one container of a pod (module docstring), at most 63 characters."""
    base = pod_name or generate_name.rstrip("-.") or "pod"
    stem = _fit(f"{base}-{container}", MAX_NAME - len(suffix) - 1)
    return f"{stem}-{suffix}"
