from __future__ import annotations

from pathlib import Path

import pytest

from hami.config import (
    DeviceConfig,
    LoadedConfig,
    default_device_config,
    parse_device_config,
)
from hami.devices.configmodel import ConfigModel
from hami.devices.hygon import HygonConfig
from hami.devices.nvidia.config import MigProfileAllowlistEntry, NvidiaConfig
from hami.errors import ConfigError

CHART_FILE = Path(__file__).parents[2] / "data" / "device-config.yaml"


def load(text: str) -> LoadedConfig:
    return parse_device_config(text, "device-config.yaml")


def aliases(model: type[ConfigModel]) -> set[str]:
    return {field.serialization_alias or name for name, field in model.model_fields.items()}


# --- the chart's file -----------------------------------------------------------------------------


def test_chart_device_config_loads_without_warnings() -> None:
    loaded = load(CHART_FILE.read_text())
    assert loaded.warnings == ()
    nvidia = loaded.config.nvidia
    assert nvidia.resource_count_name == "nvidia.com/gpu"
    assert nvidia.default_gpu_num == 1
    assert nvidia.lib_cuda_log_level == 1
    assert len(nvidia.mig_profile_allowlist) == 9
    assert nvidia.mig_profile_allowlist[1] == MigProfileAllowlistEntry(
        models=("A100-SXM4-40GB", "A100-40GB-PCIe", "A100-PCIE-40GB"),
        profiles=("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"),
    )
    assert loaded.config.hygon == HygonConfig(
        resource_count_name="hygon.com/dcunum",
        resource_memory_name="hygon.com/dcumem",
        resource_core_name="hygon.com/dcucores",
        memory_factor=1,
    )
    assert [chip.common_word for chip in loaded.config.iluvatars] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
    ascend = loaded.config.vnpus.configs
    assert [chip.common_word for chip in ascend][-1] == "Ascend910C"
    assert ascend[-1].super_pod is True
    assert ascend[1].templates[2].ai_cpu == 3


def test_built_in_defaults_are_the_charts_values_without_mig_allowlist() -> None:
    chart = load(CHART_FILE.read_text()).config
    defaults = default_device_config()
    assert defaults.nvidia.mig_profile_allowlist == ()
    assert chart.model_copy(update={"nvidia": defaults.nvidia}) == defaults
    assert chart.nvidia.model_copy(update={"mig_profile_allowlist": ()}) == defaults.nvidia


# --- keys and defaults ----------------------------------------------------------------------------


def test_nvidia_section_has_every_key_of_the_spec() -> None:
    assert aliases(NvidiaConfig) == {
        "resourceCountName",
        "resourceMemoryName",
        "resourceMemoryPercentageName",
        "resourceCoreName",
        "resourcePriorityName",
        "overwriteEnv",
        "defaultMemory",
        "defaultCores",
        "defaultGPUNum",
        "memoryFactor",
        "disableCoreLimit",
        "migProfileAllowlist",
        "gpuCorePolicy",
        "runtimeClassName",
        "deviceSplitCount",
        "deviceMemoryScaling",
        "deviceCoreScaling",
        "preConfiguredDeviceMemory",
        "libCudaLogLevel",
        "enableNumaTopology",
    }


def test_device_config_has_every_vendor_section() -> None:
    assert aliases(DeviceConfig) == {
        "nvidia",
        "cambricon",
        "hygon",
        "metax",
        "mthreads",
        "iluvatars",
        "enflame",
        "kunlun",
        "awsneuron",
        "amd",
        "vastai",
        "biren",
        "vnpus",
        "dra",
    }


@pytest.mark.parametrize(
    ("section", "keys"),
    [
        pytest.param(
            "hygon", {"resourceCountName", "resourceMemoryName", "resourceCoreName", "memoryFactor"}, id="hygon"
        ),
        pytest.param(
            "metax",
            {
                "resourceCountName",
                "resourceVCountName",
                "resourceVMemoryName",
                "resourceVCoreName",
                "sgpuTopologyAware",
            },
            id="metax",
        ),
        pytest.param(
            "enflame",
            {
                "resourceNameGCU",
                "resourceNameDRSGCU",
                "resourceNameGCUMemory",
                "resourceNameGCUCore",
                "resourceNameVGCU",
                "resourceNameVGCUPercentage",
            },
            id="enflame",
        ),
        pytest.param("kunlun", {"resourceCountName", "resourceVCountName", "resourceVMemoryName"}, id="kunlun"),
    ],
)
def test_vendor_sections_use_hamis_keys(section: str, keys: set[str]) -> None:
    model = type(getattr(default_device_config(), section))
    assert aliases(model) == keys


@pytest.mark.parametrize(
    ("attribute", "default"),
    [
        ("resource_count_name", "nvidia.com/gpu"),
        ("resource_memory_name", "nvidia.com/gpumem"),
        ("resource_memory_percentage_name", "nvidia.com/gpumem-percentage"),
        ("resource_core_name", "nvidia.com/gpucores"),
        ("resource_priority_name", "nvidia.com/priority"),
        ("overwrite_env", False),
        ("default_memory", 0),
        ("default_cores", 0),
        ("default_gpu_num", 1),
        ("memory_factor", 1),
        ("disable_core_limit", False),
        ("mig_profile_allowlist", ()),
        ("gpu_core_policy", "default"),
        ("runtime_class_name", ""),
        ("device_split_count", 10),
        ("device_memory_scaling", 1.0),
        ("device_core_scaling", 1.0),
        ("pre_configured_device_memory", 0),
        ("lib_cuda_log_level", 1),
        ("enable_numa_topology", False),
    ],
)
def test_omitted_nvidia_keys_take_their_defaults(attribute: str, default: object) -> None:
    loaded = load("nvidia:\n  resourceCountName: nvidia.com/gpu\n")
    assert getattr(loaded.config.nvidia, attribute) == default


def test_omitted_sections_take_their_defaults() -> None:
    config = load("nvidia:\n  defaultMemory: 512\n").config
    assert config.nvidia.default_memory == 512
    assert config.hygon == HygonConfig()
    assert config.model_copy(update={"nvidia": NvidiaConfig()}) == default_device_config()


def test_null_section_is_an_omitted_section() -> None:
    assert load("nvidia:\nhygon:\n  memoryFactor: 2\n").config.nvidia == NvidiaConfig()


def test_explicit_empty_values_are_kept() -> None:
    config = load('nvidia:\n  resourceMemoryName: ""\n  defaultGPUNum: 0\niluvatars: []\n').config
    assert config.nvidia.resource_memory_name == ""
    assert config.nvidia.default_gpu_num == 0
    assert config.iluvatars == ()


@pytest.mark.parametrize(
    ("yaml_value", "attribute", "value"),
    [
        pytest.param("memoryFactor: 0", "memory_factor", 1, id="memory-factor-0-means-1"),
        pytest.param('gpuCorePolicy: ""', "gpu_core_policy", "default", id="empty-core-policy-means-default"),
        pytest.param("gpuCorePolicy: force", "gpu_core_policy", "force", id="force-core-policy"),
        pytest.param('libCudaLogLevel: "4"', "lib_cuda_log_level", 4, id="log-level-as-string"),
        pytest.param("deviceMemoryScaling: 1.5", "device_memory_scaling", 1.5, id="memory-oversubscription"),
        pytest.param("deviceCoreScaling: 2", "device_core_scaling", 2.0, id="integer-scaling-is-a-float"),
    ],
)
def test_nvidia_values_are_normalised(yaml_value: str, attribute: str, value: object) -> None:
    assert getattr(load(f"nvidia:\n  {yaml_value}\n").config.nvidia, attribute) == value


# --- invalid values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "nvidia: {defaultGPUNum: -1}", "nvidia.defaultGPUNum: must be >= 0 (got -1)", id="negative-gpu-num"
        ),
        pytest.param(
            "nvidia: {defaultMemory: -5}", "nvidia.defaultMemory: must be >= 0 (got -5)", id="negative-memory"
        ),
        pytest.param(
            "nvidia: {defaultMemory: 2147483648}",
            "nvidia.defaultMemory: must be <= 2147483647 (got 2147483648)",
            id="memory-over-int32",
        ),
        pytest.param(
            "nvidia: {defaultCores: 101}", "nvidia.defaultCores: must be <= 100 (got 101)", id="cores-over-100"
        ),
        pytest.param("nvidia: {memoryFactor: -2}", "nvidia.memoryFactor: must be >= 0 (got -2)", id="negative-factor"),
        pytest.param(
            "nvidia: {defaultGPUNum: '1'}", "nvidia.defaultGPUNum: must be an integer (got '1')", id="quoted-number"
        ),
        pytest.param(
            "nvidia: {defaultGPUNum: true}", "nvidia.defaultGPUNum: must be an integer (got true)", id="boolean-number"
        ),
        pytest.param("nvidia: {defaultCores: 1.5}", "nvidia.defaultCores: must be an integer (got 1.5)", id="fraction"),
        pytest.param(
            "nvidia: {overwriteEnv: 'false'}",
            "nvidia.overwriteEnv: must be true or false (got 'false')",
            id="quoted-bool",
        ),
        pytest.param(
            "nvidia: {resourceCountName: 5}", "nvidia.resourceCountName: must be a string (got 5)", id="number-as-name"
        ),
        pytest.param(
            "nvidia: {gpuCorePolicy: strict}",
            "nvidia.gpuCorePolicy: must be one of 'default', 'force' or 'disable' (got 'strict')",
            id="unknown-core-policy",
        ),
        pytest.param(
            "nvidia: {libCudaLogLevel: 9}", "nvidia.libCudaLogLevel: must be <= 4 (got 9)", id="log-level-out-of-range"
        ),
        pytest.param(
            "nvidia: {deviceSplitCount: 0}", "nvidia.deviceSplitCount: must be >= 1 (got 0)", id="split-count-zero"
        ),
        pytest.param(
            "nvidia: {deviceSplitCount: 1025}",
            "nvidia.deviceSplitCount: must be <= 1024 (got 1025)",
            id="split-count-over-the-scheduler-limit",
        ),
        pytest.param(
            "nvidia: {deviceCoreScaling: 101}",
            "nvidia.deviceCoreScaling: must be <= 100 (got 101)",
            id="core-scaling-over-the-scheduler-limit",
        ),
        pytest.param(
            "nvidia: {deviceMemoryScaling: 0}", "nvidia.deviceMemoryScaling: must be > 0 (got 0)", id="scaling-zero"
        ),
        pytest.param("nvidia: [1, 2]", "nvidia: must be a mapping (got [1, 2])", id="section-not-a-mapping"),
        pytest.param("hygon: {memoryFactor: -1}", "hygon.memoryFactor: must be >= 0 (got -1)", id="hygon-factor"),
        pytest.param(
            "iluvatars: [{chipName: X, resourceCountName: a, resourceMemoryName: b, resourceCoreName: c}]",
            "iluvatars[0].commonWord: is required",
            id="iluvatar-incomplete",
        ),
        pytest.param(
            "vnpus: {configs: [{chipName: a, commonWord: b, resourceName: c, resourceMemoryName: d, aiCore: -1}]}",
            "vnpus.configs[0].aiCore: must be >= 0 (got -1)",
            id="ascend-negative-cores",
        ),
        pytest.param(
            "mthreads: {memoryPerCard: [0]}", "mthreads.memoryPerCard[0]: must be >= 1 (got 0)", id="mthreads-card"
        ),
    ],
)
def test_invalid_values_name_the_key_path_and_value(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        pytest.param(
            "{models: [], profiles: [1g.5gb]}",
            "nvidia.migProfileAllowlist[0].models: must not be empty (got [])",
            id="no-models",
        ),
        pytest.param(
            "{models: [A100], profiles: []}",
            "nvidia.migProfileAllowlist[0].profiles: must not be empty (got [])",
            id="no-profiles",
        ),
        pytest.param("{profiles: [1g.5gb]}", "nvidia.migProfileAllowlist[0].models: is required", id="models-missing"),
        pytest.param(
            "{models: [A100], profiles: [1g.5gb, xg.5gb]}",
            "nvidia.migProfileAllowlist[0].profiles[1]: must be a MIG profile name like 1g.10gb (<slices>g.<memory>) "
            "(got 'xg.5gb')",
            id="profile-without-slice-count",
        ),
        pytest.param(
            "{models: [A100], profiles: [1g]}",
            "nvidia.migProfileAllowlist[0].profiles[0]: must be a MIG profile name like 1g.10gb (<slices>g.<memory>) "
            "(got '1g')",
            id="profile-without-memory",
        ),
        pytest.param(
            "{models: [A100], profiles: [5gb.1g]}",
            "nvidia.migProfileAllowlist[0].profiles[0]: must be a MIG profile name like 1g.10gb (<slices>g.<memory>) "
            "(got '5gb.1g')",
            id="profile-parts-swapped",
        ),
        pytest.param(
            "{models: ['  '], profiles: [1g.5gb]}",
            "nvidia.migProfileAllowlist[0].models[0]: must not be blank (got '  ')",
            id="blank-model",
        ),
        pytest.param(
            "{models: A100, profiles: [1g.5gb]}",
            "nvidia.migProfileAllowlist[0].models: must be a list (got 'A100')",
            id="models-not-a-list",
        ),
    ],
)
def test_mig_profile_allowlist_is_validated(entry: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f"nvidia:\n  migProfileAllowlist:\n  - {entry}\n")
    assert str(caught.value) == message


def test_every_invalid_key_is_named() -> None:
    with pytest.raises(ConfigError) as caught:
        load("nvidia: {defaultGPUNum: -1, memoryFactor: -2}\nhygon: {memoryFactor: x}\n")
    assert str(caught.value) == (
        "nvidia.defaultGPUNum: must be >= 0 (also invalid: nvidia.memoryFactor, hygon.memoryFactor) (got -1)"
    )
    assert caught.value.field == "nvidia.defaultGPUNum"
    assert caught.value.value == -1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "nvidia: {a: 1\n",
            "device-config.yaml: is not valid YAML: expected ',' or '}', but got '<stream end>' at line 2, column 1",
            id="syntax-error",
        ),
        pytest.param(
            "nvidia:\n  defaultMemory: 1\n  defaultMemory: 2\n",
            "device-config.yaml: is not valid YAML: duplicate key 'defaultMemory' at line 3, column 3 "
            "(got '  defaultMemory: 2')",
            id="duplicate-key",
        ),
        pytest.param(
            "- nvidia\n",
            'device-config.yaml: must be a mapping of vendor sections (nvidia:, hygon:, …) (got ["nvidia"])',
            id="not-a-mapping",
        ),
        pytest.param(
            "1: {}\n", "device-config.yaml: has a section name that is not a string (got 1)", id="numeric-section"
        ),
    ],
)
def test_malformed_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(text)
    assert str(caught.value) == message


# --- unknown keys, legacy forms, empty files ------------------------------------------------------


def test_unknown_keys_are_reported_with_their_path() -> None:
    loaded = load(
        "nvidia:\n"
        "  deviceSplitCont: 3\n"
        "  default_memory: 512\n"
        "  migProfileAllowlist:\n"
        "  - {models: [A30], profiles: [1g.6gb], note: x}\n"
        "vnpus:\n"
        "  configs:\n"
        "  - {chipName: a, commonWord: b, resourceName: c, resourceMemoryName: d,\n"
        "     templates: [{name: t, memory: 1, x: 2}]}\n"
        "nvidiaa: {}\n"
    )
    assert loaded.warnings == (
        "nvidiaa: unknown key, ignored",
        "nvidia.deviceSplitCont: unknown key, ignored",
        "nvidia.default_memory: unknown key, ignored",
        "nvidia.migProfileAllowlist[0].note: unknown key, ignored",
        "vnpus.configs[0].templates[0].x: unknown key, ignored",
    )
    assert loaded.config.nvidia.default_memory == 0  # the snake_case spelling is not a YAML key


def test_legacy_vnpus_list_is_read_as_configs() -> None:
    loaded = load("vnpus:\n- {chipName: 910B3, commonWord: Ascend910B3, resourceName: r, resourceMemoryName: m}\n")
    assert loaded.warnings == ("vnpus: legacy list form (HAMi < 2.9); read as vnpus.configs",)
    assert [chip.common_word for chip in loaded.config.vnpus.configs] == ["Ascend910B3"]
    assert loaded.config.vnpus.hami_vnpu_core is False


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        pytest.param("", "device-config.yaml: empty device config; using the built-in defaults", id="empty-file"),
        pytest.param(
            "# nothing\n", "device-config.yaml: empty device config; using the built-in defaults", id="comment"
        ),
        pytest.param(
            "nvidia: {}\nhygon:\niluvatars: []\n",
            "device-config.yaml: every vendor section is empty; using the built-in defaults",
            id="all-sections-empty",
        ),
    ],
)
def test_empty_configs_fall_back_to_defaults_with_a_warning(text: str, warning: str) -> None:
    # HAMi refuses to start here ("all configurations are empty"); hami loads the defaults and says so.
    assert load(text) == LoadedConfig(default_device_config(), (warning,))


def test_models_are_immutable() -> None:
    config = default_device_config()
    with pytest.raises(ValueError, match="frozen"):
        config.nvidia.default_memory = 5  # type: ignore[misc]


def test_vnpus_keys_newer_than_hami_v210_are_accepted_with_a_warning() -> None:
    loaded = load("vnpus: {hamiVnpuMode: hami-core, enpuPolicy: elastic, hamiVnpuCore: true}\n")
    assert loaded.warnings == tuple(
        f"vnpus.{key}: not read by HAMi v2.10 and ignored (soft split is vnpus.hamiVnpuCore, a node's hami-vnpu-core "
        "annotation and a pod's huawei.com/vnpu-mode: hami-core)"
        for key in ("hamiVnpuMode", "enpuPolicy")
    )
    assert loaded.config.vnpus.hami_vnpu_core is True
