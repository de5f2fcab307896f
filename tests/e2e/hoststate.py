"""What the real test node changes on the host, recorded before it starts and put back afterwards.

kubelet, kube-proxy, containerd and the CNI bridge plugin change machine-wide state that outlives them:

* sysctls -- kubelet sets ``kernel.panic``, ``kernel.panic_on_oops`` and ``vm.overcommit_memory``; the bridge plugin
  turns on ``net.ipv4.ip_forward``; kube-proxy may set ``route_localnet`` and the conntrack limits;
* iptables chains and rules (``KUBE-*`` of kubelet and kube-proxy, ``CNI-*`` of the bridge plugin), IPv4 and IPv6;
* mounts (pod volumes, container root file systems, network namespaces under ``/run/netns``);
* cgroup directories: the ``kubepods`` tree kubelet makes in every hierarchy (cgroupfs driver), into which containerd
  and runc put the pods' containers;
* files and directories at fixed host paths (``/var/lib/kubelet/device-plugins``, ``/var/log/containers``,
  ``/run/containerd/s``, ``/var/lib/cni``, the chart's ``/usr/local/vgpu`` and ``/tmp/vgpulock`` host paths);
* a bridge network interface and processes that outlive containerd (``containerd-shim-runc-v2`` and containers).

:func:`take` records all of it into a :class:`Snapshot` (saved as JSON before anything starts, so that the next run
can finish the clean-up of a run that was killed), :func:`restore` undoes the difference. Everything that runs a
command goes through a :data:`Runner` and every file-system path is taken relative to a ``root``, so the logic is
unit-tested (``tests/unit/test_realnode_hoststate.py``) with a fake runner and a temporary directory, no root needed.
Restoring never touches what was there before: only rules, chains, mounts, paths and links that appeared after the
snapshot are removed. Cgroups and processes are narrower still, because other things start on a host while the tests
run (a login session, a ``systemd-run`` scope, a restarted service, another container runtime's containers, a CI
runner's per-job cgroups): only the cgroup trees the harness's own kubelet made (``Snapshot.owned_cgroups``, and only
when the tree itself is new) are emptied and removed, and only processes in them, processes the harness launched
(``Snapshot.launched``: pid and start time, so a reused pid is never hit) and processes whose command line carries
the harness's markers (``Snapshot.process_markers``) are ended, each by its pid. Any other new cgroup, and the
processes in it, is reported (``Restorer.notes``) and left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: Runs a command (argv) and returns its stdout; raises ``subprocess.CalledProcessError`` when it fails.
Runner = Callable[[Sequence[str]], str]

SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
IPTABLES_TOOLS = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle")
CGROUP_ROOT = "/sys/fs/cgroup"
OWNED_CGROUPS = ("kubepods",)
"""The cgroup trees (top-level names in each hierarchy) the harness's kubelet makes with the cgroupfs driver; containerd
and runc put every container of a pod there (the pod's cgroup path comes from kubelet) and make none of their own."""
BUILTIN_CHAINS = frozenset({"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"})


def run_command(argv: Sequence[str]) -> str:
    """The real :data:`Runner`."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout


@dataclass
class Snapshot:
    """The host as it was before the real node started (see the module docstring)."""

    sysctls: dict[str, str] = field(default_factory=dict)
    iptables: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    paths: dict[str, bool] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    #: mount points below these prefixes that appear later are unmounted (the harness's own directories)
    owned_prefixes: list[str] = field(default_factory=list)
    #: a process whose command line contains one of these strings belongs to the harness (its sockets, dirs)
    process_markers: list[str] = field(default_factory=list)
    #: the cgroup trees the harness's kubelet makes (``OWNED_CGROUPS``); a record saved before this field gets them
    owned_cgroups: list[str] = field(default_factory=lambda: list(OWNED_CGROUPS))
    #: the processes the harness launched, as ``[pid, start time]`` (``process_start``: clock ticks after boot)
    launched: list[list[int]] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        return cls(**json.loads(path.read_text()))


# ----------------------------------------------------------------------------------------------------
# reading the host


def sysctl_path(root: Path, name: str) -> Path:
    return root / "proc/sys" / name.replace(".", "/")


def read_sysctls(root: Path, names: Iterable[str] = SYSCTLS) -> dict[str, str]:
    """The current values of ``names`` that exist on this kernel (a missing module's keys are left out)."""
    values = {}
    for name in names:
        with contextlib.suppress(OSError):
            values[name] = sysctl_path(root, name).read_text().strip()
    return values


def iptables_rules(runner: Runner, tools: Iterable[str] = IPTABLES_TOOLS) -> dict[str, dict[str, list[str]]]:
    """``<tool> -t <table> -S`` for every tool and table that answers (``{tool: {table: lines}}``)."""
    rules: dict[str, dict[str, list[str]]] = {}
    for tool in tools:
        for table in IPTABLES_TABLES:
            try:
                out = runner([tool, "-w", "-t", table, "-S"])
            except (subprocess.CalledProcessError, FileNotFoundError):
                continue
            rules.setdefault(tool, {})[table] = [line for line in out.splitlines() if line.strip()]
    return rules


def mount_points(root: Path) -> list[str]:
    """Mount points from ``/proc/self/mountinfo`` (field 5, octal escapes decoded), in mount order."""
    points = []
    for line in (root / "proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(fields[4].encode().decode("unicode_escape"))
    return points


def cgroup_hierarchies(root: Path) -> list[str]:
    """The host paths of the cgroup hierarchies: ``/sys/fs/cgroup`` itself on a cgroup v2 host (it holds
    ``cgroup.controllers``), else each directory mounted below it (v1 and hybrid: ``memory``, ``unified``, …)."""
    base = root / CGROUP_ROOT.lstrip("/")
    if not base.is_dir():
        return []
    if (base / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [
        f"{CGROUP_ROOT}/{entry.name}" for entry in sorted(base.iterdir()) if entry.is_dir() and not entry.is_symlink()
    ]


def cgroup_dirs(root: Path) -> list[str]:
    """Every directory below each cgroup hierarchy's root (host paths, sorted)."""
    found: list[str] = []
    for hierarchy in cgroup_hierarchies(root):
        for directory, subdirs, _ in os.walk(root / hierarchy.lstrip("/")):
            found += ["/" + str(Path(directory, sub).relative_to(root)) for sub in subdirs]
    return sorted(found)


def process_start(root: Path, pid: int) -> int | None:
    """When process ``pid`` started (``/proc/<pid>/stat`` field 22, clock ticks after boot), None when it is gone: with
    the pid, what tells a process apart from a later one that got the same pid."""
    try:
        stat = (root / "proc" / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name in parentheses may hold spaces
    return int(fields[19]) if len(fields) > 19 else None


def network_links(runner: Runner) -> list[str]:
    out = runner(["ip", "-o", "link", "show"])
    return sorted({line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line})


def take(
    runner: Runner,
    root: Path,
    *,
    paths: Iterable[str],
    owned_prefixes: Iterable[str],
    process_markers: Iterable[str],
) -> Snapshot:
    """Record the host (``root`` is ``/`` except in tests)."""
    return Snapshot(
        sysctls=read_sysctls(root),
        iptables=iptables_rules(runner),
        mounts=mount_points(root),
        cgroups=cgroup_dirs(root),
        paths={path: (root / path.lstrip("/")).exists() for path in paths},
        links=network_links(runner),
        owned_prefixes=list(owned_prefixes),
        process_markers=list(process_markers),
    )


# ----------------------------------------------------------------------------------------------------
# undoing the difference (pure functions first)


def iptables_undo(before: Sequence[str], after: Sequence[str]) -> list[list[str]]:
    """The ``-S``-style argument lists (without tool and table) that turn ``after`` back into ``before`` for one
    table: flush the chains that appeared, delete the rules that appeared in chains that were there, delete the
    new chains, and put changed policies back. Rules inside new chains go with their chain's flush."""
    old_chains = {line.split()[1] for line in before if line.startswith(("-N ", "-P "))}
    new_chains = [line.split()[1] for line in after if line.startswith("-N ") and line.split()[1] not in old_chains]
    old_rules = set(before)
    commands = [["-F", chain] for chain in new_chains]
    for line in reversed(after):
        if line.startswith("-A ") and line not in old_rules and line.split()[1] not in new_chains:
            commands.append(["-D", *shlex.split(line)[1:]])
    commands += [["-X", chain] for chain in new_chains]
    policies = {line.split()[1]: line for line in before if line.startswith("-P ")}
    for line in after:
        if line.startswith("-P ") and line.split()[1] in policies and policies[line.split()[1]] != line:
            commands.append(shlex.split(policies[line.split()[1]]))
    return commands


def new_mounts(before: Sequence[str], now: Sequence[str], prefixes: Sequence[str]) -> list[str]:
    """Mount points in ``now`` that were not in ``before`` and lie below one of ``prefixes`` (a directory, or a
    name prefix when it ends with ``-``, such as ``/run/netns/cni-``), deepest first."""
    seen = set(before)

    def below(point: str, prefix: str) -> bool:
        if prefix.endswith("-"):
            return point.startswith(prefix)
        return point == prefix or point.startswith(prefix.rstrip("/") + "/")

    found = {point for point in now if point not in seen and any(below(point, p) for p in prefixes)}
    return sorted(found, key=lambda point: (point.count("/"), point), reverse=True)


def new_cgroups(before: Sequence[str], now: Sequence[str]) -> list[str]:
    """Cgroup directories that appeared, deepest first (the order ``rmdir`` needs)."""
    old = set(before)
    return sorted((d for d in now if d not in old), key=lambda d: (d.count("/"), d), reverse=True)


def split_cgroups(
    before: Sequence[str], now: Sequence[str], hierarchies: Sequence[str], owned: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The cgroup directories that appeared, as (the harness's, anyone else's), each deepest first. A directory is
    the harness's when it lies in a tree ``<hierarchy>/<name>`` with ``name`` in ``owned`` and that tree itself is
    new: one that was there before (another kubelet's, or a leftover the last run reported) is never taken."""
    old = set(before)
    ours: list[str] = []
    theirs: list[str] = []
    for directory in new_cgroups(before, now):
        hierarchy = max((h for h in hierarchies if directory.startswith(h + "/")), key=len, default=None)
        top = directory[len(hierarchy) + 1 :].split("/")[0] if hierarchy is not None else ""
        tree = f"{hierarchy}/{top}"
        (ours if hierarchy is not None and top in owned and tree not in old else theirs).append(directory)
    return ours, theirs


def harness_processes(root: Path, markers: Sequence[str], own_pid: int) -> list[int]:
    """Pids whose command line contains one of ``markers`` (the harness's socket or directory paths), other than
    ``own_pid``: leftovers such as ``containerd-shim-runc-v2 -address <our socket>``."""
    pids = []
    if not markers:
        return pids
    for entry in (root / "proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own_pid:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(marker in cmdline for marker in markers):
            pids.append(int(entry.name))
    return sorted(pids)


def cgroup_processes(root: Path, directories: Iterable[str]) -> list[int]:
    """Pids still in the cgroups ``directories`` (containers of a run that was killed)."""
    pids: set[int] = set()
    for directory in directories:
        with contextlib.suppress(OSError):
            text = (root / directory.lstrip("/") / "cgroup.procs").read_text()
            pids.update(int(pid) for pid in text.split())
    return sorted(pids)


# ----------------------------------------------------------------------------------------------------
# restoring


@dataclass
class Restorer:
    """Undoes what appeared since ``snapshot``; every step is tried and its failures collected in ``problems``
    (so one stuck mount does not leave the sysctls changed)."""

    snapshot: Snapshot
    runner: Runner = run_command
    root: Path = Path("/")
    kill: Callable[[int, int], None] = os.kill
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What appeared on the host that is not the harness's and was left alone (new cgroups, their processes)."""

    def run(self) -> list[str]:
        """Restore everything; return the problems (empty when the host is as recorded)."""
        self.end_processes()
        self.unmount()
        self.remove_cgroups()
        self.restore_iptables()
        self.remove_links()
        self.restore_sysctls()
        self.remove_paths()
        return self.problems

    def _try(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except (OSError, subprocess.CalledProcessError) as err:
            detail = err.stderr.strip() if isinstance(err, subprocess.CalledProcessError) and err.stderr else err
            self.problems.append(f"{what}: {detail}")

    def _cgroups(self) -> tuple[list[str], list[str]]:
        """The new cgroups: (the harness's, anyone else's); see ``split_cgroups``."""
        snapshot, now = self.snapshot, cgroup_dirs(self.root)
        return split_cgroups(snapshot.cgroups, now, cgroup_hierarchies(self.root), snapshot.owned_cgroups)

    def end_processes(self) -> None:
        """SIGKILL, by pid, the processes in the harness's new cgroups, the ones it launched (still the same process:
        same start time) and the ones carrying its markers; report the processes of any other new cgroup."""
        ours, theirs = self._cgroups()
        pids = set(harness_processes(self.root, self.snapshot.process_markers, os.getpid()))
        pids.update(cgroup_processes(self.root, ours))
        pids.update(pid for pid, start in self.snapshot.launched if process_start(self.root, pid) == start)
        pids.discard(os.getpid())
        for pid in sorted(pids):
            with contextlib.suppress(ProcessLookupError):
                self.kill(pid, signal.SIGKILL)
        for directory in reversed(theirs):  # shallowest first, as a person reads a tree
            found = cgroup_processes(self.root, [directory])
            held = f" (processes {', '.join(map(str, found))})" if found else ""
            self.notes.append(f"left alone: cgroup {directory}{held} appeared during the run but is not the harness's")

    def unmount(self) -> None:
        # network namespaces of pods: containerd names them cni-<uuid>
        prefixes = [*self.snapshot.owned_prefixes, "/run/netns/cni-", "/var/run/netns/cni-", "/var/lib/kubelet"]
        for point in new_mounts(self.snapshot.mounts, mount_points(self.root), prefixes):
            self._try(f"unmount {point}", lambda point=point: self.runner(["umount", "-l", point]))

    def remove_cgroups(self) -> None:
        """Remove the harness's new cgroups, deepest first; any other new cgroup stays (``end_processes`` notes it)."""
        for directory in self._cgroups()[0]:
            self._try(f"remove cgroup {directory}", (self.root / directory.lstrip("/")).rmdir)

    def restore_iptables(self) -> None:
        now = iptables_rules(self.runner, self.snapshot.iptables.keys())
        for tool, tables in now.items():
            for table, after in tables.items():
                before = self.snapshot.iptables.get(tool, {}).get(table, [])
                for args in iptables_undo(before, after):
                    command = [tool, "-w", "-t", table, *args]
                    self._try(" ".join(command), lambda command=command: self.runner(command))

    def remove_links(self) -> None:
        for link in network_links(self.runner):
            if link not in self.snapshot.links:
                self._try(f"delete link {link}", lambda link=link: self.runner(["ip", "link", "delete", link]))

    def remove_paths(self) -> None:
        for path, existed in self.snapshot.paths.items():
            target = self.root / path.lstrip("/")
            if not existed and (target.exists() or target.is_symlink()):
                self._try(f"remove {path}", lambda target=target: _remove_tree(target))

    def restore_sysctls(self) -> None:
        current = read_sysctls(self.root, self.snapshot.sysctls)
        for name, value in self.snapshot.sysctls.items():
            if current.get(name) != value:
                self._try(f"sysctl {name}={value}", lambda name=name, value=value: _write(self.root, name, value))


def _write(root: Path, name: str, value: str) -> None:
    sysctl_path(root, name).write_text(value + "\n")


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            _remove_tree(child)
        path.rmdir()
    else:
        path.unlink()
