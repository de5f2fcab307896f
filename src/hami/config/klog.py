"""klog's command-line flags, as HAMi's binaries take them, translated for hami's commands.

HAMi's ``scheduler``, ``nvidia-device-plugin`` and ``vGPUmonitor`` are Go programs logging with klog, and HAMi's chart
and its users pass klog's flags (``-v=4``, ``--logtostderr``, ...) in ``extraArgs``. Go's flag package reads ``-name``
and ``--name`` alike, ``-name=value`` or ``-name value``, and a boolean flag only as ``-name`` or ``-name=bool``.

hami logs to stderr only, in its own format, at one level: the verbosity maps onto it (``-v`` of 4 or more, klog's
debug detail, is ``debug``; below 4 it is ``info``). Flags about log files and klog's header format have no effect;
each one gives a notice, so nothing is dropped without a word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["DEBUG_VERBOSITY", "KlogArgs", "translate"]

DEBUG_VERBOSITY: Final = 4
"""klog verbosity from which hami logs at debug level (HAMi logs its debug detail at ``klog.V(4)`` and above)."""

# klog's boolean flags: hami logs to stderr, which is what these two ask for.
_STDERR_BOOLS: Final = frozenset({"logtostderr", "alsologtostderr"})
# klog's boolean flags about its header format and files: no effect in hami.
_NOOP_BOOLS: Final = frozenset(
    {"add_dir_header", "skip_headers", "skip_log_headers", "one_output", "legacy_stderr_threshold_behavior"}
)
# klog's (and component-base's) flags with a value, other than -v: no effect in hami.
_NOOP_VALUES: Final = frozenset(
    {
        "log_dir",
        "log_file",
        "log_file_max_size",
        "stderrthreshold",
        "vmodule",
        "log_backtrace_at",
        "log-flush-frequency",
        "logging-format",
    }
)
_TRUE: Final = frozenset({"1", "t", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "f", "false", "no", "off"})


@dataclass(frozen=True)
class KlogArgs:
    """The arguments with klog's flags taken out; what the flags asked for."""

    args: list[str]
    verbosity: int | None = None
    """The last ``-v`` given (Go's flag package: the last one wins), or None."""
    notices: list[str] = field(default_factory=list)
    """One line per flag that has no effect in hami, for the person who passed it."""


class KlogFlagError(ValueError):
    """A klog flag with a value hami cannot read (``-v=x``)."""


def _split(arg: str) -> tuple[str, str | None] | None:
    """``-name=value``/``--name`` -> (name, value or None); None for what is not a flag."""
    if not arg.startswith("-") or arg in {"-", "--"}:
        return None
    body = arg[2:] if arg.startswith("--") else arg[1:]
    name, sep, value = body.partition("=")
    return name, (value if sep else None)


def _bool(name: str, value: str | None) -> bool:
    if value is None:
        return True
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise KlogFlagError(f"-{name}={value}: expected true or false (a klog flag)")


def _verbosity(value: str) -> int:
    try:
        level = int(value.strip())
    except ValueError:
        level = -1
    if level < 0:
        raise KlogFlagError(f"-v={value}: klog's verbosity is a number 0 or more (e.g. -v=4)")
    return level


def _value(arg: str, value: str | None, args: list[str], index: int) -> tuple[str, int]:
    """A value flag's value: after ``=``, else the next argument (Go's ``-name value``)."""
    if value is not None:
        return value, index
    if index >= len(args):
        if arg.lstrip("-") == "v":
            raise KlogFlagError("-v needs a number (klog's verbosity, e.g. -v=4)")
        raise KlogFlagError(f"{arg} needs a value (a klog flag)")
    return args[index], index + 1


def _notice(arg: str, name: str, value: str | None) -> str | None:
    """What to tell about a klog flag other than -v (None: it asks for what hami does anyway)."""
    if name in _STDERR_BOOLS:
        return None if _bool(name, value) else f"{arg}: hami logs to stderr only (klog flag, no effect)"
    if name in _NOOP_BOOLS:
        _bool(name, value)
        return f"{arg}: hami writes its own log format (klog flag, no effect)"
    raise KlogFlagError(f"{arg}: not a klog flag")


def translate(args: list[str]) -> KlogArgs:
    """Take klog's flags out of ``args`` (until a ``--``); keep everything else in order.

    Raises :class:`KlogFlagError` for a value hami cannot read.
    """
    kept: list[str] = []
    notices: list[str] = []
    verbosity: int | None = None
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            kept.extend(args[index - 1 :])
            break
        split = _split(arg)
        name, value = split if split is not None else ("", None)
        if name == "v":
            text, index = _value(arg, value, args, index)
            verbosity = _verbosity(text)
        elif name in _NOOP_VALUES:
            text, index = _value(arg, value, args, index)
            notices.append(f"{arg.split('=', 1)[0]}={text}: hami logs to stderr only (klog flag, no effect)")
        elif name in _STDERR_BOOLS or name in _NOOP_BOOLS:
            notice = _notice(arg, name, value)
            if notice is not None:
                notices.append(notice)
        else:
            kept.append(arg)
    return KlogArgs(args=kept, verbosity=verbosity, notices=notices)
