"""Dynamic Resource Allocation beside device-plugin pods: one ledger that counts both (issue 18).

* :mod:`hami.scheduling.dra.mapping` — a slice's devices and what an allocation takes of a card, in hami's units;
* :mod:`hami.scheduling.dra.conflict` — cards claims and hami's pods together hold beyond capacity;
* :mod:`hami.scheduling.dra.ledger` — :class:`DraLedger`: slices and claims → held records in ``ClusterState``;
* :mod:`hami.scheduling.dra.held` — those records (:class:`DraRecord`) and what they hold per card;
* :mod:`hami.scheduling.dra.reports` — the problems (:class:`DraProblem`) and warnings (:class:`DraWarning`).

DRA mode (issue 38), a pod written for HAMi turned into ResourceClaims at admission:

* :mod:`hami.scheduling.dra.translate` — ``DraAdmission`` (the webhook's decision and patch) and ``claim_spec``;
* :mod:`hami.scheduling.dra.names` — the claims' names.
"""

from __future__ import annotations

from hami.scheduling.dra.held import DraRecord, HeldCard, held_by_card
from hami.scheduling.dra.ledger import DraLedger
from hami.scheduling.dra.mapping import DraDevice, ProblemKind
from hami.scheduling.dra.reports import DraProblem, DraWarning, WarningKind

__all__ = [
    "DraDevice",
    "DraLedger",
    "DraProblem",
    "DraRecord",
    "DraWarning",
    "HeldCard",
    "ProblemKind",
    "WarningKind",
    "held_by_card",
]
