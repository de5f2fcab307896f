"""``hami scheduler`` refuses a half-configured listener at start-up: exit status 2 and one line naming the flag
and the value (nothing is served, no API call is made)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami.server.command import scheduler_main

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    """``scheduler_main`` configures the root logger; put it back for the tests that follow."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    return str(path)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"extender_bind": "0.0.0.0:8888"},
            "hami scheduler: --extender-bind: /filter and /bind may bind any pod to any node",
            id="extender-beyond-loopback-without-authentication",
        ),
        pytest.param(
            {"extender_token_file": "{tmp}/empty"},
            "hami scheduler: --extender-token-file: the token file holds no token",
            id="empty-token-file",
        ),
        pytest.param(
            {"extender_token_file": "{tmp}/missing"},
            "hami scheduler: --extender-token-file: cannot read the token file: No such file or directory",
            id="missing-token-file",
        ),
        pytest.param(
            {"cert_file": "{tmp}/missing.crt", "key_file": "{tmp}/missing.key"},
            "hami scheduler: --cert_file: cannot load it with --key_file",
            id="missing-certificate",
        ),
    ],
)
def test_a_half_configured_listener_exits_2_naming_the_flag(
    kubeconfig: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: dict[str, str], expected: str
) -> None:
    (tmp_path / "empty").write_text("\n")
    given: dict[str, object] = {key: value.format(tmp=tmp_path) for key, value in overrides.items()}

    code = scheduler_main(given, kubeconfig, json_logs=False)

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(expected), err
    assert len(err.splitlines()) == 1
