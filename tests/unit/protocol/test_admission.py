"""The AdmissionReview codec: what is read from a request and how an answer is written."""

from __future__ import annotations

import base64
import json

import pytest

from hami.protocol.admission import (
    ADMISSION_V1BETA1,
    AdmissionResponse,
    MalformedReview,
    decode_review,
    encode_review,
)


def test_decode_reads_uid_operation_namespace_kind_object_and_dry_run() -> None:
    body = {
        "apiVersion": ADMISSION_V1BETA1,
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "operation": "CREATE",
            "namespace": "ns",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "object": {"spec": {"containers": []}},
            "dryRun": True,
        },
    }
    request = decode_review(json.dumps(body).encode())
    assert (request.api_version, request.uid, request.operation, request.namespace, request.kind) == (
        ADMISSION_V1BETA1,
        "u",
        "CREATE",
        "ns",
        "Pod",
    )
    assert request.object == {"spec": {"containers": []}}
    assert request.dry_run is True


def test_a_malformed_field_keeps_what_was_read_for_the_answer() -> None:
    body = {"apiVersion": ADMISSION_V1BETA1, "request": {"uid": "u", "operation": 7, "object": {"a": 1}}}
    with pytest.raises(MalformedReview) as caught:
        decode_review(json.dumps(body).encode())
    assert (caught.value.api_version, caught.value.uid) == (ADMISSION_V1BETA1, "u")
    assert str(caught.value) == "request.operation: must be a string (got 7)"


def test_an_allowed_answer_with_a_patch() -> None:
    ops = ({"op": "add", "path": "/spec/schedulerName", "value": "hami"},)
    answer = json.loads(encode_review(ADMISSION_V1BETA1, AdmissionResponse("u", True, patch=ops)))
    assert answer == {
        "apiVersion": ADMISSION_V1BETA1,
        "kind": "AdmissionReview",
        "response": {
            "uid": "u",
            "allowed": True,
            "status": {"code": 200},
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(list(ops), separators=(",", ":")).encode()).decode(),
        },
    }


def test_a_denial_is_forbidden() -> None:
    answer = json.loads(encode_review("admission.k8s.io/v1", AdmissionResponse("u", False, 403, "no")))
    assert answer["response"] == {
        "uid": "u",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "no"},
    }
