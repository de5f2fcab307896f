"""bench.breakdown: what bounds a pipeline, read from the components' own histograms."""

from __future__ import annotations

from bench import breakdown

BEFORE = """# HELP rest_client_rate_limiter_duration_seconds [ALPHA] Client side rate limiter latency in seconds.
rest_client_rate_limiter_duration_seconds_bucket{host="127.0.0.1:6443",verb="PUT",le="0.005"} 3
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="PUT"} 0.5
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="PUT"} 3
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="a",status="Success"} 1
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="b",status="Success"} 2
scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",profile="a",status="Success"} 10
scheduler_scheduling_algorithm_duration_seconds_sum 0.25
scheduler_scheduling_algorithm_duration_seconds_count 5
"""
AFTER = """rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="PUT"} 2.5
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="PUT"} 13
rest_client_rate_limiter_duration_seconds_sum{host="127.0.0.1:6443",verb="POST"} 1
rest_client_rate_limiter_duration_seconds_count{host="127.0.0.1:6443",verb="POST"} 4
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="a",status="Success"} 1
scheduler_framework_extension_point_duration_seconds_sum{extension_point="Filter",profile="b",status="Success"} 4
scheduler_framework_extension_point_duration_seconds_count{extension_point="Filter",profile="a",status="Success"} 30
"""


def test_sums_are_added_over_the_labels_not_named() -> None:
    sums = breakdown.histogram_sums(BEFORE, breakdown.SCHEDULER)
    assert sums == {
        "rest_client_rate_limiter_duration_seconds": {"PUT": (0.5, 3.0)},
        "scheduler_framework_extension_point_duration_seconds": {"Filter": (3.0, 10.0)},
        "scheduler_scheduling_algorithm_duration_seconds": {"": (0.25, 5.0)},
    }


def test_time_per_pod_counts_what_was_spent_between_the_reads() -> None:
    before = breakdown.histogram_sums(BEFORE, breakdown.SCHEDULER)
    after = breakdown.histogram_sums(AFTER, breakdown.SCHEDULER)
    assert breakdown.ms_per_pod(before, after, 100) == {
        "rest_client_rate_limiter_duration_seconds": {"PUT": 20.0, "POST": 10.0},
        "scheduler_framework_extension_point_duration_seconds": {"Filter": 20.0},
    }
    assert breakdown.mean_ms(before, after)["rest_client_rate_limiter_duration_seconds"] == {
        "PUT": 200.0,
        "POST": 250.0,
    }


def test_the_bounds_table_adds_a_client_wait_up_over_verbs() -> None:
    inside = {
        "kube-scheduler": {
            "rest_client_rate_limiter_duration_seconds": {"PUT": 20.0, "POST": 10.0},
            "scheduler_framework_extension_point_duration_seconds": {"Filter": 2.0, "PreBind": 7.0},
        },
        "kube-apiserver": {"apiserver_admission_webhook_admission_duration_seconds": {"dra.hami.io": 4.5}},
        "hami": {"hami_request_duration_seconds": {"prioritize": 3.0, "webhook-dra": 1.5}},
    }
    figures = breakdown.bound_figures(inside)
    assert figures["kube-scheduler client limit wait"] == 30.0
    assert figures["kcm client limit wait"] == 0.0
    assert figures["Filter"] == 2.0
    assert figures["PreBind"] == 7.0
    assert figures["Bind"] == 0.0
    assert figures["webhooks (ms a call)"] == 4.5
    assert figures["hami prioritize (ms a call)"] == 3.0
    assert figures["hami webhook (ms a call)"] == 1.5
    assert figures["hami filter (ms a call)"] == 0.0
