"""Fuzzing every annotation decoder and every request-body decoder (hypothesis): whatever the input, the decoder
returns a value or raises ``InvalidInput`` (the error hami turns into a message naming the field); nothing else
escapes. Inputs are drawn from text near each format (its separators and digits), arbitrary text, and bytes;
examples are bounded in size, so memory stays bounded. The HTTP bodies are fuzzed end to end in
``tests/unit/server/test_fuzz_http.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami.errors import InvalidInput
from hami.protocol import keys
from hami.protocol.admission import decode_review
from hami.protocol.allocation import decode_mig_allocations, decode_pod_devices
from hami.protocol.bindphase import decode_bind_phase, decode_unix_time
from hami.protocol.extender import decode_binding_args, decode_filter_args
from hami.protocol.handshake import decode_handshake
from hami.protocol.inventory import decode_inventory_json, decode_inventory_legacy
from hami.protocol.nodelock import decode_node_lock
from hami.protocol.quantity import parse_quantity
from hami.protocol.scores import decode_pair_scores
from hami.protocol.weights import decode_scoring_weights

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Alphabets near each format: separators, digits, signs, units, letters that appear in valid values.
NEAR = st.text(alphabet=st.sampled_from(list("0123456789,:;_-+.eE[]{}\"' TZabcdefGPUNVIDA\\\u00ff\u2028")), max_size=80)
ANY_TEXT = st.text(max_size=120)

JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)

ANNOTATION_DECODERS: dict[str, Callable[[str], object]] = {
    "pod devices": decode_pod_devices,
    "mig allocations": decode_mig_allocations,
    "bind phase": decode_bind_phase,
    "bind time": decode_unix_time,
    "handshake": decode_handshake,
    "inventory json": decode_inventory_json,
    "inventory legacy": lambda v: decode_inventory_legacy(v, keys.NVIDIA_REGISTER),
    "node lock": decode_node_lock,
    "pair scores": decode_pair_scores,
    "scoring weights": decode_scoring_weights,
    "quantity": lambda v: parse_quantity(v, "limits"),
}


def only_input_errors(decode: Callable[[Any], object], value: Any) -> None:
    error: InvalidInput | None = None
    try:
        decode(value)
    except InvalidInput as err:
        error = err
    if error is not None:  # a message for a person, naming the field
        assert error.field
        assert str(error).startswith(error.field)


@pytest.mark.parametrize("name", sorted(ANNOTATION_DECODERS))
@FUZZ
@given(value=NEAR | ANY_TEXT | JSON.map(lambda v: msgspec.json.encode(v).decode()))
def test_annotation_decoders_raise_only_input_errors(name: str, value: str) -> None:
    only_input_errors(ANNOTATION_DECODERS[name], value)


BODY_DECODERS: dict[str, Callable[[bytes], object]] = {
    "ExtenderArgs": decode_filter_args,
    "ExtenderBindingArgs": decode_binding_args,
    "AdmissionReview": decode_review,
}


def bodies() -> st.SearchStrategy[bytes]:
    shaped = st.fixed_dictionaries(
        {},
        optional={
            "Pod": JSON,
            "NodeNames": JSON,
            "Nodes": JSON,
            "PodName": JSON,
            "PodNamespace": JSON,
            "PodUID": JSON,
            "Node": JSON,
            "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]) | JSON,
            "kind": st.just("AdmissionReview") | JSON,
            "request": st.fixed_dictionaries({}, optional={"uid": JSON, "object": JSON, "kind": JSON}) | JSON,
        },
    )
    return (
        st.binary(max_size=200)
        | JSON.map(msgspec.json.encode)
        | shaped.map(msgspec.json.encode)
        | st.integers(1, 20_000).map(lambda depth: b"[" * depth + b"]" * depth)
    )


@pytest.mark.parametrize("name", sorted(BODY_DECODERS))
@FUZZ
@given(body=bodies())
def test_body_decoders_raise_only_input_errors(name: str, body: bytes) -> None:
    only_input_errors(BODY_DECODERS[name], body)
