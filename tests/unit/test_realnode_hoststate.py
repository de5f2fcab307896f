"""The real test node's host clean-up (tests/e2e/hoststate.py, tests/e2e/realnode.py) against a fake command runner
and a fake root file system: nothing here needs root or touches the machine."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.e2e import hoststate, realnode
from tests.e2e.hoststate import Restorer, Snapshot

FILTER_BEFORE = [
    "-P INPUT ACCEPT",
    "-P FORWARD ACCEPT",
    "-P OUTPUT ACCEPT",
    "-N DOCKER-USER",
    "-A DOCKER-USER -j RETURN",
]
FILTER_AFTER = [
    "-P INPUT ACCEPT",
    "-P FORWARD DROP",
    "-P OUTPUT ACCEPT",
    "-N DOCKER-USER",
    "-N KUBE-FORWARD",
    "-N KUBE-SERVICES",
    '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-SERVICES',
    "-A FORWARD -j KUBE-FORWARD",
    "-A DOCKER-USER -j RETURN",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -j ACCEPT',
]


class FakeHost:
    """A runner that answers ``iptables -S`` / ``ip link`` from tables it keeps, and applies -D/-F/-X/-P and
    ``ip link delete`` to them, recording every command."""

    def __init__(self, rules: dict[str, dict[str, list[str]]], links: list[str]) -> None:
        self.rules = rules
        self.links = links
        self.commands: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> str:
        argv = list(argv)
        self.commands.append(argv)
        if argv[0] in ("iptables", "ip6tables"):
            return self._iptables(argv)
        if argv[:4] == ["ip", "-o", "link", "show"]:
            return "".join(f"{i}: {name}: <UP> mtu 1500\n" for i, name in enumerate(self.links, 1))
        if argv[:3] == ["ip", "link", "delete"]:
            self.links.remove(argv[3])
            return ""
        if argv[0] == "umount":
            return ""
        raise AssertionError(f"unexpected command {argv}")

    def _iptables(self, argv: list[str]) -> str:
        tool, table, action = argv[0], argv[3], argv[4:]
        if tool not in self.rules:
            raise FileNotFoundError(tool)
        lines = self.rules[tool].setdefault(table, [])
        if action == ["-S"]:
            return "\n".join(lines) + "\n"
        verb, chain = action[0], action[1]
        if verb == "-F":
            lines[:] = [line for line in lines if not line.startswith(f"-A {chain} ")]
        elif verb == "-X":
            assert not any(f"-j {chain}" in line for line in lines), f"{chain} still referenced"
            lines.remove(f"-N {chain}")
        elif verb == "-D":
            import shlex

            lines.remove(shlex.join(["-A", *action[1:]]).replace("'", '"'))
        elif verb == "-P":
            lines[:] = [f"-P {chain} {action[2]}" if line.startswith(f"-P {chain} ") else line for line in lines]
        return ""


def test_iptables_undo_removes_only_what_appeared_and_restores_policies() -> None:
    commands = hoststate.iptables_undo(FILTER_BEFORE, FILTER_AFTER)

    assert commands == [
        ["-F", "KUBE-FORWARD"],
        ["-F", "KUBE-SERVICES"],
        ["-D", "FORWARD", "-j", "KUBE-FORWARD"],
        ["-D", "INPUT", "-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-SERVICES"],
        ["-X", "KUBE-FORWARD"],
        ["-X", "KUBE-SERVICES"],
        ["-P", "FORWARD", "ACCEPT"],
    ]


def test_iptables_undo_of_an_unchanged_table_is_empty() -> None:
    assert hoststate.iptables_undo(FILTER_BEFORE, FILTER_BEFORE) == []


def test_restore_puts_the_fake_hosts_iptables_and_links_back(tmp_path: Path) -> None:
    host = FakeHost(
        {"iptables": {"filter": list(FILTER_AFTER), "nat": ["-P PREROUTING ACCEPT"]}}, ["lo", "eth0", "hami-cni0"]
    )
    snapshot = Snapshot(
        iptables={"iptables": {"filter": list(FILTER_BEFORE), "nat": ["-P PREROUTING ACCEPT"]}}, links=["lo", "eth0"]
    )
    _fake_proc(tmp_path, mountinfo=[])

    problems = Restorer(snapshot, runner=host, root=tmp_path, kill=_no_kill).run()

    assert problems == []
    assert host.rules["iptables"]["filter"] == FILTER_BEFORE
    assert host.links == ["lo", "eth0"]
    assert ["ip", "link", "delete", "hami-cni0"] in host.commands


def test_sysctls_are_read_and_changed_ones_written_back(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    _sysctl(tmp_path, "kernel.panic", "1")
    _sysctl(tmp_path, "vm.overcommit_memory", "0")
    _sysctl(tmp_path, "net.ipv4.conf.all.route_localnet", "0")
    before = hoststate.read_sysctls(tmp_path)
    assert before == {"kernel.panic": "1", "vm.overcommit_memory": "0", "net.ipv4.conf.all.route_localnet": "0"}
    _sysctl(tmp_path, "kernel.panic", "10")  # what kubelet sets
    _sysctl(tmp_path, "vm.overcommit_memory", "1")

    problems = Restorer(Snapshot(sysctls=before), runner=FakeHost({}, []), root=tmp_path, kill=_no_kill).run()

    assert problems == []
    assert hoststate.read_sysctls(tmp_path) == before


def test_new_mounts_below_owned_prefixes_are_unmounted_deepest_first(tmp_path: Path) -> None:
    before = ["/", "/proc", "/tmp/hami-realnode-other"]
    _fake_proc(
        tmp_path,
        mountinfo=[
            *before,
            "/tmp/hami-realnode/kubelet/pods/uid/volumes/kubernetes.io~projected/token",
            "/tmp/hami-realnode/containerd/state/run/rootfs",
            "/run/netns/cni-1234",
            "/mnt/somebody-else",
        ],
    )
    host = FakeHost({}, [])
    snapshot = Snapshot(mounts=before, owned_prefixes=["/tmp/hami-realnode"])

    assert Restorer(snapshot, runner=host, root=tmp_path, kill=_no_kill).run() == []

    unmounted = [c[2] for c in host.commands if c[0] == "umount"]
    assert unmounted == [
        "/tmp/hami-realnode/kubelet/pods/uid/volumes/kubernetes.io~projected/token",
        "/tmp/hami-realnode/containerd/state/run/rootfs",
        "/run/netns/cni-1234",
    ]


def test_new_cgroups_are_emptied_of_their_processes_and_removed(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    memory = tmp_path / "sys/fs/cgroup/memory"
    (memory / "user.slice").mkdir(parents=True)
    snapshot = Snapshot(cgroups=hoststate.cgroup_dirs(tmp_path))
    pod = memory / "kubepods/besteffort/pod1"
    pod.mkdir(parents=True)
    (pod / "cgroup.procs").write_text("4242\n")
    killed: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        killed.append((pid, sig))
        (pod / "cgroup.procs").unlink()  # a real cgroup's files go with rmdir; the fake's must go first

    problems = Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=kill).run()

    assert problems == []
    assert killed == [(4242, signal.SIGKILL)]
    assert not (memory / "kubepods").exists()
    assert (memory / "user.slice").is_dir()


def test_an_unrelated_new_cgroup_and_its_process_are_reported_and_left_alone(tmp_path: Path) -> None:
    """While the tests ran, a login session, a service and the CI runner's job tracking made cgroups of their own: the
    restore ends and removes only the tree the harness's kubelet made and reports the rest."""
    _fake_proc(tmp_path, mountinfo=[])
    memory = tmp_path / "sys/fs/cgroup/memory"
    (memory / "user.slice").mkdir(parents=True)
    (memory / "process_api").mkdir()
    snapshot = Snapshot(cgroups=hoststate.cgroup_dirs(tmp_path))
    session = _cgroup(memory / "user.slice/session-9.scope", 5151)
    job = _cgroup(memory / "process_api/job-1", 6161, 6162)
    pod = _cgroup(memory / "kubepods/besteffort/pod1", 4242)
    killed: list[int] = []

    def kill(pid: int, sig: int) -> None:
        assert sig == signal.SIGKILL
        killed.append(pid)
        (pod / "cgroup.procs").unlink()  # the fake cgroup's file must go before rmdir

    restorer = Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=kill)

    assert restorer.run() == []
    assert killed == [4242]
    assert not (memory / "kubepods").exists()
    assert (session / "cgroup.procs").read_text() == "5151\n"  # untouched
    assert (job / "cgroup.procs").read_text() == "6161\n6162\n"
    assert restorer.notes == [
        "left alone: cgroup /sys/fs/cgroup/memory/process_api/job-1 (processes 6161, 6162) appeared during the run "
        "but is not the harness's",
        "left alone: cgroup /sys/fs/cgroup/memory/user.slice/session-9.scope (processes 5151) appeared during the run "
        "but is not the harness's",
    ]


def test_a_kubepods_tree_that_was_there_before_is_not_the_harnesss(tmp_path: Path) -> None:
    """Another kubelet on the host (or a leftover the last run reported) owns a kubepods tree: its new pods stay."""
    _fake_proc(tmp_path, mountinfo=[])
    cpu = tmp_path / "sys/fs/cgroup/cpu"
    (cpu / "kubepods/burstable").mkdir(parents=True)
    snapshot = Snapshot(cgroups=hoststate.cgroup_dirs(tmp_path))
    _cgroup(cpu / "kubepods/burstable/pod-theirs", 7070)

    restorer = Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=_no_kill)

    assert restorer.run() == []
    assert (cpu / "kubepods/burstable/pod-theirs").is_dir()
    assert [note.split(" (")[0] for note in restorer.notes] == [
        "left alone: cgroup /sys/fs/cgroup/cpu/kubepods/burstable/pod-theirs"
    ]


def test_on_a_cgroup_v2_host_the_top_level_kubepods_tree_is_the_harnesss(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    base = tmp_path / "sys/fs/cgroup"
    (base / "system.slice").mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpu memory pids\n")
    snapshot = Snapshot(cgroups=hoststate.cgroup_dirs(tmp_path))
    assert snapshot.cgroups == ["/sys/fs/cgroup/system.slice"]
    _cgroup(base / "system.slice/restarted.service", 8080)
    (base / "kubepods/pod1").mkdir(parents=True)  # empty (a real one's files go with its rmdir)

    restorer = Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=_no_kill)

    assert restorer.run() == []
    assert not (base / "kubepods").exists()
    assert (base / "system.slice/restarted.service").is_dir()
    assert len(restorer.notes) == 1


def test_launched_processes_are_ended_only_while_their_pid_is_still_theirs(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    _process(tmp_path, 300, "kubelet", stat_start=1000)
    _process(tmp_path, 301, "vim", stat_start=5000)  # pid 301 was containerd's (started at 1001), now reused
    snapshot = Snapshot(launched=[[300, 1000], [301, 1001], [302, 1002]])  # 302: gone already
    killed: list[int] = []

    Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=lambda pid, sig: killed.append(pid)).run()

    assert killed == [300]


def test_the_start_time_is_read_past_a_command_name_with_spaces(tmp_path: Path) -> None:
    _process(tmp_path, 400, "x", stat_start=123456, comm="a (b) c")
    assert hoststate.process_start(tmp_path, 400) == 123456
    assert hoststate.process_start(tmp_path, 401) is None


def test_a_record_saved_before_the_owned_cgroups_were_recorded_still_loads(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"sysctls": {"kernel.panic": "1"}}')
    loaded = Snapshot.load(tmp_path / "state.json")
    assert (loaded.owned_cgroups, loaded.launched) == (["kubepods"], [])


def test_leftover_shims_are_found_by_the_harness_socket_in_their_command_line(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    _process(tmp_path, 100, "containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/tmp/hami-realnode/c.sock")
    _process(tmp_path, 101, "containerd-shim-runc-v2", "-address", "/run/containerd/containerd.sock")
    _process(tmp_path, 102, "bash")

    assert hoststate.harness_processes(tmp_path, ["-address /tmp/hami-realnode/c.sock"], own_pid=1) == [100]


def test_paths_that_did_not_exist_are_removed_and_existing_ones_kept(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=[])
    (tmp_path / "var/lib/cni").mkdir(parents=True)
    snapshot = hoststate.take(
        FakeHost({}, []), tmp_path, paths=["/var/lib/kubelet", "/var/lib/cni"], owned_prefixes=[], process_markers=[]
    )
    assert snapshot.paths == {"/var/lib/kubelet": False, "/var/lib/cni": True}
    (tmp_path / "var/lib/kubelet/device-plugins").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/device-plugins/kubelet.sock").write_text("")
    (tmp_path / "var/lib/cni/results").mkdir()

    assert Restorer(snapshot, runner=FakeHost({}, []), root=tmp_path, kill=_no_kill).run() == []

    assert not (tmp_path / "var/lib/kubelet").exists()
    assert (tmp_path / "var/lib/cni/results").is_dir()  # existed before: left as it is


def test_failed_steps_are_reported_and_the_others_still_run(tmp_path: Path) -> None:
    _fake_proc(tmp_path, mountinfo=["/tmp/hami-realnode/stuck"])
    _sysctl(tmp_path, "kernel.panic", "10")

    def runner(argv: Sequence[str]) -> str:
        if argv[0] == "umount":
            raise subprocess.CalledProcessError(32, list(argv), stderr="umount: target is busy")
        return FakeHost({}, [])(argv)

    snapshot = Snapshot(sysctls={"kernel.panic": "1"}, owned_prefixes=["/tmp/hami-realnode"])
    problems = Restorer(snapshot, runner=runner, root=tmp_path, kill=_no_kill).run()

    assert problems == ["unmount /tmp/hami-realnode/stuck: umount: target is busy"]
    assert hoststate.read_sysctls(tmp_path, ["kernel.panic"]) == {"kernel.panic": "1"}


def test_snapshot_survives_a_save_and_load(tmp_path: Path) -> None:
    snapshot = Snapshot(
        sysctls={"kernel.panic": "1"}, iptables={"iptables": {"nat": ["-P OUTPUT ACCEPT"]}}, links=["lo"]
    )
    snapshot.save(tmp_path / "state.json")
    assert Snapshot.load(tmp_path / "state.json") == snapshot


def test_a_crashed_runs_record_is_detected_and_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "hami-realnode"
    assert realnode.cleanup_leftovers(base) == []  # no record: nothing to do
    Snapshot(sysctls={"kernel.panic": "1"}).save(base / realnode.STATE_FILE_NAME)
    restored: list[Snapshot] = []

    class Recording(Restorer):
        def run(self) -> list[str]:
            restored.append(self.snapshot)
            return []

    monkeypatch.setattr(hoststate, "Restorer", Recording)

    assert realnode.cleanup_leftovers(base) == []
    assert restored == [Snapshot(sysctls={"kernel.panic": "1"})]
    assert not (base / realnode.STATE_FILE_NAME).exists()


def test_a_failed_restore_keeps_the_record_for_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "hami-realnode"
    base.mkdir()

    class Failing(Restorer):
        def run(self) -> list[str]:
            return ["unmount /x: busy"]

    monkeypatch.setattr(hoststate, "Restorer", Failing)

    assert realnode.restore_host(Snapshot(links=["lo"]), base) == ["unmount /x: busy"]
    assert Snapshot.load(base / realnode.STATE_FILE_NAME) == Snapshot(links=["lo"])


# ----------------------------------------------------------------------------------------------------
# helpers


def _no_kill(pid: int, sig: int) -> None:
    raise AssertionError(f"unexpected kill of {pid}")


def _fake_proc(root: Path, mountinfo: list[str]) -> None:
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    lines = [f"{i} 1 0:{i} / {point} rw - tmpfs tmpfs rw" for i, point in enumerate(mountinfo, 20)]
    (root / "proc/self/mountinfo").write_text("\n".join(lines) + "\n")


def _sysctl(root: Path, name: str, value: str) -> None:
    path = hoststate.sysctl_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def _process(root: Path, pid: int, *argv: str, stat_start: int = 0, comm: str = "") -> None:
    (root / "proc" / str(pid)).mkdir(parents=True)
    (root / "proc" / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    if stat_start:  # /proc/<pid>/stat: pid (comm) state, then fields 4..21, field 22 the start time
        after = ["S", *["0"] * 18, str(stat_start), "0"]
        (root / "proc" / str(pid) / "stat").write_text(f"{pid} ({comm or argv[0]}) {' '.join(after)}\n")


def _cgroup(directory: Path, *pids: int) -> Path:
    directory.mkdir(parents=True)
    (directory / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
    return directory


def _binaries(version: str, tmp_path: Path) -> realnode.Binaries:
    return realnode.Binaries(directory=tmp_path, kubernetes_version=version, etcd_version="v3.7.0")


def test_the_node_keeps_debians_containerd_until_its_kubelet_needs_2_x(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMI_TESTENV_CACHE", str(tmp_path))
    monkeypatch.delenv("HAMI_CONTAINERD_BIN_DIR", raising=False)
    assert realnode.locate_containerd(_binaries("v1.33.5", tmp_path)) is None
    with pytest.raises(realnode.RealNodeError, match=r"the real node's containerd is not built: .*containerd-v2"):
        realnode.locate_containerd(_binaries("v1.37.2", tmp_path))


def test_a_containerd_directory_given_is_used_whatever_the_version_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMI_CONTAINERD_BIN_DIR", str(tmp_path))
    with pytest.raises(realnode.RealNodeError, match="lacks containerd, containerd-shim-runc-v2, ctr"):
        realnode.locate_containerd(_binaries("v1.36.3", tmp_path))
    for name in realnode.CONTAINERD_BINARIES:
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    assert realnode.locate_containerd(_binaries("v1.36.3", tmp_path)) == tmp_path
