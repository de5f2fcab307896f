"""The ``hami scheduler`` command: flags named as HAMi's (scheduler-core.md §8.1), settings, logging, run."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

from hami.config import DeviceConfig, default_device_config, load_settings, parse_device_config
from hami.errors import CannotListen, HamiError
from hami.k8s.config import load_config
from hami.server.listen import EXIT_CANNOT_LISTEN
from hami.server.runtime import Runtime

__all__ = ["JsonFormatter", "configure_logging", "scheduler_main"]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(debug: bool, json_logs: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_logs else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def load_device_config(path: str | None) -> DeviceConfig:
    if not path:
        return default_device_config()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise HamiError(f"--device-config-file {path}: cannot read it: {err.strerror}") from None
    loaded = parse_device_config(text, path)
    for warning in loaded.warnings:
        logging.getLogger("hami.config").warning("%s", warning)
    return loaded.config


def scheduler_main(overrides: dict[str, object], kubeconfig: str | None, json_logs: bool) -> int:
    """Run the scheduler until SIGTERM; returns the exit code. Configuration errors exit 2 with one message, a
    listener that cannot be bound (port in use) exits 3 with one message."""
    try:
        settings = load_settings(overrides)
        configure_logging(settings.debug, json_logs)
        device_config = load_device_config(settings.device_config_file)
        kube = load_config(kubeconfig)
        runtime = Runtime(settings, device_config, kube)  # loads the TLS and token files
    except HamiError as err:
        print(f"hami scheduler: {err}", file=sys.stderr)
        return 2
    try:
        asyncio.run(runtime.run())
    except CannotListen as err:
        print(f"hami scheduler: {err}", file=sys.stderr)
        return EXIT_CANNOT_LISTEN
    return 0
