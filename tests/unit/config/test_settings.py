from __future__ import annotations

import os

import pytest

from hami.config import SchedulerSettings, load_settings, parse_go_duration
from hami.errors import ConfigError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings read HAMI_* variables: start every test without any."""
    for name in list(os.environ):
        if name.upper().startswith("HAMI_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings == SchedulerSettings(
        scheduler_name="hami-scheduler",
        node_scheduler_policy="binpack",
        gpu_scheduler_policy="spread",
        http_bind="127.0.0.1:8080",
        metrics_bind_address=":9395",
        kube_qps=300.0,
        kube_burst=600,
        kube_timeout=0.0,
        node_lock_timeout=300.0,
        node_lock_retry_timeout=28.0,
        force_overwrite_default_scheduler=True,
        leader_elect=False,
        device_config_file=None,
        node_label_selector={},
    )
    assert settings.lease_name == "hami-scheduler"


@pytest.mark.parametrize(
    ("overrides", "attribute", "value"),
    [
        pytest.param({"node_lock_timeout": "5m"}, "node_lock_timeout", 300.0, id="go-duration-minutes"),
        pytest.param({"node_lock_timeout": "1m30s"}, "node_lock_timeout", 90.0, id="go-duration-compound"),
        pytest.param({"node_lock_timeout": 45}, "node_lock_timeout", 45.0, id="seconds-as-number"),
        pytest.param({"node_lock_timeout": "2.5"}, "node_lock_timeout", 2.5, id="seconds-as-text"),
        pytest.param({"node_lock_retry_timeout": "0"}, "node_lock_retry_timeout", 0.0, id="retry-zero-fails-fast"),
        pytest.param({"kube_timeout": "300ms"}, "kube_timeout", 0.3, id="milliseconds"),
        pytest.param({"gpu_scheduler_policy": "binpack"}, "gpu_scheduler_policy", "binpack", id="binpack"),
        pytest.param({"gpu_scheduler_policy": "topology-aware"}, "gpu_scheduler_policy", "topology-aware", id="topo"),
        pytest.param({"gpu_scheduler_policy": "mutex"}, "gpu_scheduler_policy", "mutex", id="mutex"),
        pytest.param({"gpu_scheduler_policy": "numa"}, "gpu_scheduler_policy", "numa", id="numa"),
        pytest.param(
            {"gpu_scheduler_policy": " numa , binpack"}, "gpu_scheduler_policy", "numa,binpack", id="chain-trimmed"
        ),
        pytest.param({"node_scheduler_policy": "spread"}, "node_scheduler_policy", "spread", id="node-spread"),
        pytest.param(
            {"node_label_selector": "gpu=on, zone = a"},
            "node_label_selector",
            {"gpu": "on", "zone": "a"},
            id="selector-text",
        ),
        pytest.param({"node_label_selector": {"gpu": "on"}}, "node_label_selector", {"gpu": "on"}, id="selector-map"),
        pytest.param({"http_bind": "0.0.0.0:443"}, "http_bind", "0.0.0.0:443", id="bind-all"),
        pytest.param({"http_bind": "[::]:80"}, "http_bind", "[::]:80", id="bind-ipv6"),
        pytest.param({"metrics_bind_address": ":9000"}, "metrics_bind_address", ":9000", id="bind-any-host"),
        pytest.param({"leader_elect_resource_name": "lease"}, "lease_name", "lease", id="explicit-lease"),
    ],
)
def test_overrides(overrides: dict[str, object], attribute: str, value: object) -> None:
    assert getattr(load_settings(overrides), attribute) == value


def test_environment_variables_use_the_hami_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_SCHEDULER_NAME", "my-scheduler")
    monkeypatch.setenv("HAMI_LEADER_ELECT", "true")
    monkeypatch.setenv("HAMI_KUBE_QPS", "50")
    monkeypatch.setenv("HAMI_NODE_LABEL_SELECTOR", "gpu=on")
    monkeypatch.setenv("HAMI_NODE_LOCK_TIMEOUT", "2m")
    settings = load_settings()
    assert (settings.scheduler_name, settings.leader_elect, settings.kube_qps) == ("my-scheduler", True, 50.0)
    assert settings.node_label_selector == {"gpu": "on"}
    assert settings.node_lock_timeout == 120.0


def test_arguments_beat_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_SCHEDULER_NAME", "from-env")
    assert load_settings({"scheduler_name": "from-flag"}).scheduler_name == "from-flag"


def test_hami_nodelock_expire_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    # HAMi reads HAMI_NODELOCK_EXPIRE and then overwrites it with the flag default (spec §11 item 4).
    monkeypatch.setenv("HAMI_NODELOCK_EXPIRE", "10m")
    assert load_settings().node_lock_timeout == 600.0
    monkeypatch.setenv("HAMI_NODE_LOCK_TIMEOUT", "1m")
    assert load_settings().node_lock_timeout == 60.0
    assert load_settings({"node_lock_timeout": "30s"}).node_lock_timeout == 30.0


def test_unprefixed_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_LOCK_TIMEOUT", "1s")
    monkeypatch.setenv("SCHEDULER_NAME", "other")
    settings = load_settings()
    assert (settings.node_lock_timeout, settings.scheduler_name) == (300.0, "hami-scheduler")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"node_scheduler_policy": "pack"},
            "--node-scheduler-policy: must be one of 'binpack' or 'spread'; did you mean binpack? (got 'pack')",
            id="unknown-node-policy",
        ),
        pytest.param(
            {"gpu_scheduler_policy": "numa,tight"},
            "--gpu-scheduler-policy: unknown policy 'tight'; use binpack, mutex, numa, spread, topology-aware "
            "(got 'numa,tight')",
            id="unknown-gpu-policy-token",
        ),
        pytest.param(
            {"gpu_scheduler_policy": "spread,"},
            "--gpu-scheduler-policy: unknown policy ''; use binpack, mutex, numa, spread, topology-aware "
            "(got 'spread,')",
            id="empty-chain-token",
        ),
        pytest.param(
            {"node_lock_timeout": "5 minutes"},
            "--node-lock-timeout: has an invalid part '5 minutes': expected a number and a unit (ns, us, ms, s, m, h)",
            id="not-a-duration",
        ),
        pytest.param({"node_lock_timeout": 0}, "--node-lock-timeout: must be > 0 (got 0)", id="zero-lock-timeout"),
        pytest.param(
            {"node_lock_retry_timeout": "-1s"},
            "--node-lock-retry-timeout: must be >= 0 (got -1.0)",
            id="negative-retry",
        ),
        pytest.param({"kube_qps": 0}, "--kube-qps: must be > 0 (got 0)", id="zero-qps"),
        pytest.param(
            {"legacy_metrics": "true"},
            "--legacy-metrics: is not supported: hami exports HAMi's current metric names (hami_*) only, not the "
            "legacy ones (GPUDeviceMemoryLimit, vGPUMemoryAllocated, …); leave it false (got 'true')",
            id="legacy-metrics-refused",
        ),
        pytest.param(
            {"disable_devices": "nvidia,nvdia"},
            "--disable-devices: unknown device family 'nvdia'; use nvidia, hygon, cambricon, ascend, iluvatar, metax, "
            "mthreads, enflame, kunlun, awsneuron, amd, vastai, biren; did you mean nvidia? (got 'nvidia,nvdia')",
            id="unknown-family",
        ),
        pytest.param(
            {"disable_devices": "ascend", "enable_ascend": True},
            "--disable-devices: names ascend, which --enable-ascend switches on: give one or the other (got 'ascend')",
            id="ascend-on-and-off",
        ),
        pytest.param({"kube_burst": 0}, "--kube-burst: must be >= 1 (got 0)", id="zero-burst"),
        pytest.param({"scheduler_name": ""}, "--scheduler-name: must not be empty", id="no-name"),
        pytest.param(
            {"http_bind": "8080"},
            "--http_bind: must be host:port (for example 0.0.0.0:443, :9395 or [::]:80) (got '8080')",
            id="bind-without-colon",
        ),
        pytest.param(
            {"metrics_bind_address": ":70000"},
            "--metrics-bind-address: must be host:port (for example 0.0.0.0:443, :9395 or [::]:80) (got ':70000')",
            id="port-out-of-range",
        ),
        pytest.param(
            {"node_label_selector": "gpu"},
            "--node-label-selector: expected key=value pairs separated by commas, not 'gpu'",
            id="selector-without-value",
        ),
        pytest.param(
            {"cert_file": "/tls/cert.pem"},
            "--key_file: --cert_file and --key_file must be given together",
            id="cert-without-key",
        ),
        pytest.param({"leader_elect": "maybe"}, "--leader-elect: must be true or false (got 'maybe')", id="bad-bool"),
        pytest.param({"node_lock_timout": "5m"}, "node_lock_timout: unknown setting (got '5m')", id="misspelt-setting"),
    ],
)
def test_invalid_settings_name_the_setting_and_value(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides)
    assert str(caught.value) == message


def test_invalid_environment_variable_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_NODELOCK_EXPIRE", "-5m")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == "HAMI_NODELOCK_EXPIRE: must be > 0 (got -300.0)"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "HAMI_NODE_LOCK_TIMEOUT",
            "bogus",
            "HAMI_NODE_LOCK_TIMEOUT: has an invalid part 'bogus': expected a number and a unit (ns, us, ms, s, m, h)",
        ),
        (
            "HAMI_NODE_SCHEDULER_POLICY",
            "spred",
            "HAMI_NODE_SCHEDULER_POLICY: must be one of 'binpack' or 'spread'; did you mean spread? (got 'spred')",
        ),
        ("HAMI_KUBE_QPS", "fast", "HAMI_KUBE_QPS: must be a number (got 'fast')"),
        ("hami_debug", "maybe", "HAMI_DEBUG: must be true or false (got 'maybe')"),
    ],
)
def test_an_invalid_environment_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == message


def test_the_command_line_wins_and_is_the_name_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_NODE_SCHEDULER_POLICY", "spread")
    with pytest.raises(ConfigError, match=r"^--node-scheduler-policy: .*did you mean spread\? \(got 'spred'\)$"):
        load_settings({"node_scheduler_policy": "spred"})


def test_every_setting_has_one_flag_and_its_variables() -> None:
    from hami.config.settings import env_names, flag_name

    assert flag_name("node_lock_timeout") == "--node-lock-timeout"
    assert (flag_name("http_bind"), flag_name("cert_file"), flag_name("key_file")) == (
        "--http_bind",
        "--cert_file",
        "--key_file",
    )
    assert env_names("node_lock_timeout") == ("HAMI_NODE_LOCK_TIMEOUT", "HAMI_NODELOCK_EXPIRE")
    assert env_names("kube_qps") == ("HAMI_KUBE_QPS",)


def test_the_scheduler_command_s_flags_are_the_settings_flags() -> None:
    """The one mapping (``flag_name``) is the command line's: every setting's flag is an option of
    ``hami scheduler`` (so an error naming it names something a user can type)."""
    import typer

    from hami.cli import app

    scheduler = typer.main.get_command(app).commands["scheduler"]  # type: ignore[attr-defined]
    options = {opt for param in scheduler.params for opt in param.opts}
    from hami.config.settings import flag_name

    for setting in SchedulerSettings.model_fields:
        assert flag_name(setting) in options, setting


# --- Go durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("300ms", 0.3),
        ("1.5s", 1.5),
        ("5m", 300.0),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("2h45m", 9900.0),
        ("1h0m0.5s", 3600.5),
        ("100us", 0.0001),
        ("100µs", 0.0001),
        ("100μs", 0.0001),
        ("5ns", 5e-9),
        (".5m", 30.0),
        ("-1.5h", -5400.0),
        ("+5s", 5.0),
    ],
)
def test_parse_go_duration(text: str, seconds: float) -> None:
    assert parse_go_duration(text, "flag") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("", "is not a duration: expected a number and a unit, such as 300ms, 5m or 1h30m", id="empty"),
        pytest.param("-", "is not a duration: expected a number and a unit, such as 300ms, 5m or 1h30m", id="sign"),
        pytest.param("5", "is missing a unit (ns, us, ms, s, m or h)", id="no-unit"),
        pytest.param("1m30", "is missing a unit (ns, us, ms, s, m or h)", id="trailing-number"),
        pytest.param("5d", "has an invalid part '5d': expected a number and a unit (ns, us, ms, s, m, h)", id="days"),
        pytest.param("m", "has an invalid part 'm': expected a number and a unit (ns, us, ms, s, m, h)", id="unit"),
        pytest.param(".s", "has an invalid part '.s': expected a number and a unit (ns, us, ms, s, m, h)", id="dot"),
        pytest.param("3000000h", "is out of range (more than about 292 years)", id="overflow"),
    ],
)
def test_parse_go_duration_rejects(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_go_duration(text, "--node-lock-timeout")
    # the value is shown once: not at all when empty, not again when the reason quotes it
    shown = "" if not text or repr(text) in reason else f" (got {text!r})"
    assert str(caught.value) == f"--node-lock-timeout: {reason}{shown}"


# --- listeners and their authentication ---------------------------------------------------------------

TLS = {"cert_file": "tls.crt", "key_file": "tls.key"}


def test_the_extender_listens_on_loopback_by_default_and_metrics_are_open() -> None:
    settings = load_settings()
    assert settings.extender_bind == "127.0.0.1:8888"
    assert (settings.extender_client_ca_file, settings.extender_token_file, settings.metrics_secure) == ("", "", False)


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        pytest.param({"extender_bind": "0.0.0.0:8888"}, "--extender-bind", "listen beyond loopback only", id="any-v4"),
        pytest.param({"extender_bind": ":8888"}, "--extender-bind", "listen beyond loopback only", id="port-only"),
        pytest.param({"extender_bind": "[::]:8888"}, "--extender-bind", "listen beyond loopback only", id="any-v6"),
        pytest.param(
            {"extender_bind": "10.0.0.7:8888", **TLS}, "--extender-bind", "--extender-client-ca-file", id="pod-ip"
        ),
        pytest.param(
            {"extender_bind": "0.0.0.0:8888", "extender_client_ca_file": "ca.crt"},
            "--extender-client-ca-file",
            "give --cert_file and --key_file as well",
            id="client-ca-without-a-serving-certificate",
        ),
        pytest.param(
            {"metrics_secure": True}, "--metrics-secure", "give --cert_file and --key_file", id="metrics-token-in-clear"
        ),
        pytest.param(
            {"extender_bind": "127.0.0.1:8080"}, "--extender-bind", "the same port as --http_bind", id="same-port"
        ),
        pytest.param(
            {"extender_bind": "127.0.0.1:9395", "metrics_bind_address": ":9395"},
            "--metrics-bind-address",
            "the same port as --extender-bind",
            id="metrics-on-every-address-of-that-port",
        ),
    ],
)
def test_half_configured_listeners_are_refused(overrides: dict[str, object], field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(overrides)
    assert caught.value.field == field
    assert caught.value.value == overrides.get(field.removeprefix("--").replace("-", "_"), True)
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"extender_bind": "127.0.0.2:8888"}, id="another-loopback-address"),
        pytest.param({"extender_bind": "[::1]:8888"}, id="ipv6-loopback"),
        pytest.param({"extender_bind": "localhost:8888"}, id="localhost"),
        pytest.param({"extender_bind": "0.0.0.0:8888", "extender_token_file": "t"}, id="any-with-a-token"),
        pytest.param({"extender_bind": "0.0.0.0:8888", "extender_client_ca_file": "ca", **TLS}, id="any-with-mtls"),
        pytest.param({"metrics_secure": True, **TLS}, id="secure-metrics-with-tls"),
        pytest.param({"http_bind": "127.0.0.1:0", "extender_bind": "127.0.0.1:0"}, id="two-free-ports"),
    ],
)
def test_safe_listener_settings_are_accepted(overrides: dict[str, object]) -> None:
    load_settings(overrides)


@pytest.mark.parametrize(
    ("overrides", "on", "off"),
    [
        pytest.param({}, {"nvidia", "hygon", "cambricon", "metax", "mthreads"}, {"ascend", "iluvatar"}, id="defaults"),
        pytest.param({"enable_ascend": True}, {"ascend", "nvidia"}, {"iluvatar"}, id="enable-ascend"),
        pytest.param({"enable_iluvatar": "true"}, {"iluvatar", "hygon"}, {"ascend"}, id="enable-iluvatar"),
        pytest.param({"disable_devices": "nvidia, hygon"}, {"cambricon"}, {"nvidia", "hygon", "ascend"}, id="off"),
        pytest.param({"disable_devices": ""}, {"nvidia", "hygon"}, {"ascend"}, id="empty-list"),
    ],
)
def test_enabled_families_follow_hami_switches(overrides: dict[str, object], on: set[str], off: set[str]) -> None:
    families = load_settings(overrides).enabled_families
    assert on <= families
    assert not off & families


def test_disabled_devices_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_DISABLE_DEVICES", "hygon")
    monkeypatch.setenv("HAMI_ENABLE_ILUVATAR", "true")
    families = load_settings().enabled_families
    assert "hygon" not in families
    assert {"iluvatar", "nvidia"} <= families


def test_dra_mode_is_off_by_default_and_names_hamis_device_class() -> None:
    settings = load_settings({})
    assert settings.dra_mode is False
    assert settings.dra_device_class == "hami-core-gpu.project-hami.io"
    assert settings.dra_card_memory == ()


def test_dra_card_memory_is_a_sorted_set_of_mib_sizes() -> None:
    assert load_settings({"dra_card_memory": "81920, 40960,40960"}).dra_card_memory == (40960, 81920)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        pytest.param("40GB", "expected MiB numbers separated by commas (40960,81920), not '40GB'", id="unit"),
        pytest.param("0", "expected at most 8 sizes in MiB, each above 0, not '0'", id="zero"),
        pytest.param("1,2,3,4,5,6,7,8,9", "expected at most 8 sizes in MiB, each above 0", id="too-many"),
    ],
)
def test_a_bad_dra_card_memory_names_the_flag_and_the_value(value: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"dra_card_memory": value})
    assert str(caught.value).startswith("--dra-card-memory: ")
    assert said in str(caught.value)
