"""``hami simulate --report``: the page is self-contained, and headless Chromium draws its plots.

The browser is Debian's ``chromium`` (installed by ``make test-deps``, which ``make test`` runs). The screenshot
is checked by colour: heat-map cells, pending-reason bars and placement bars each use colours of their own
(``hami.simulate.html``), so counting those pixels tells whether each plot drew, and how much of it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from hami.simulate.html import BAR_COLOUR, HEAT_COLOURS, NODE_BAR_COLOUR, PLACED_COLOUR
from tests.unit.simulate.helpers import DATA, run_cli

WIDTH, HEIGHT = 1200, 3600  # the whole demo page, placements included
CELL_AREA = 52 * 26  # one heat-map cell, less the glyphs of its percentage


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _screenshot(page: Path, png: Path) -> Counter[tuple[int, int, int]]:
    browser = shutil.which("chromium")
    assert browser, "chromium is missing: run `make test-deps` (make test does) to install Debian's chromium"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # root in CI containers; the page is our own file
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--screenshot={png}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with Image.open(png) as image:
        return Counter(image.convert("RGB").get_flattened_data())


def _report(tmp_path: Path, *args: str | Path) -> tuple[Path, dict[str, object]]:
    page = tmp_path / "report.html"
    result = run_cli(*args, "--report", page, "-o", "json")
    assert result.code == 0, result.stderr
    assert f"report written to {page}" in result.stderr
    return page, json.loads(result.stdout)


def test_report_is_self_contained(tmp_path: Path) -> None:
    page, _ = _report(tmp_path, "--demo")
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    # nothing fetched: no script, no link, no remote URL, no image source
    assert not re.search(r"<script|<link|<img|<iframe|https?://(?!www\.w3\.org/2000/svg)", html)
    assert html.count('class="plot heat"') == 2
    assert "demo/too-big" in html
    assert "CardInsufficientMemory" in html


def test_report_shows_the_fragmentation_of_the_json_document(tmp_path: Path) -> None:
    page, doc = _report(tmp_path, "--snapshot", DATA / "fragmented.yaml", DATA / "pods-web.yaml")
    html = page.read_text(encoding="utf-8")
    fragmentation = doc["fragmentation"]
    assert isinstance(fragmentation, dict)
    assert f"Cluster index {fragmentation['index']}" in html
    for model in fragmentation["models"]:
        row = f"<td>{model['model']}</td><td>{model['cards']}</td><td>{model['wholeFreeCards']}</td>"
        assert row in html
    assert "{'" not in html  # a table, not a Python repr


@pytest.mark.parametrize("target", ["demo", "no-pending"])
def test_chromium_draws_every_plot(tmp_path: Path, target: str) -> None:
    if target == "demo":
        page, doc = _report(tmp_path, "--demo")
    else:
        page, doc = _report(tmp_path, "-s", DATA / "kubectl-list.json", DATA / "pods-web.yaml")
    pixels = _screenshot(page, tmp_path / "shot.png")
    devices = len(doc["utilization"])  # type: ignore[arg-type]
    heat = sum(pixels[_rgb(c)] for c in HEAT_COLOURS)
    # two heat maps, one cell per device each; most of every cell is its fill colour
    assert heat >= 2 * devices * CELL_AREA * 0.7, (heat, devices)
    summary = doc["summary"]
    assert isinstance(summary, dict)
    placed_pixels = pixels[_rgb(PLACED_COLOUR)]
    reason_pixels = pixels[_rgb(BAR_COLOUR)]
    assert placed_pixels > 1000 * min(summary["placed"], 1)
    if summary["pending"]:
        assert reason_pixels > 1000
    else:  # no pending pod: no reason bars at all (the check above can fail)
        assert reason_pixels == 0


def test_heat_maps_label_cards_and_pending_bars_separate_nodes_and_cards(tmp_path: Path) -> None:
    page, doc = _report(tmp_path, "--demo")
    html = page.read_text(encoding="utf-8")
    assert html.count('<text class="card"') == 2 * len(doc["utilization"])  # type: ignore[arg-type]
    assert ">#0</text>" in html
    assert "a cell per card: #index on the node" in html
    cards = html.index("<h3>Cards</h3>")
    nodes = html.index("<h3>Nodes</h3>")
    assert cards < nodes
    # the node-level reason is under Nodes only, card checks under Cards only
    assert "NodeUnregistered" in html[nodes:]
    assert "NodeUnregistered" not in html[cards:nodes]
    assert "CardInsufficientMemory" in html[cards:nodes]
    pixels = _screenshot(page, tmp_path / "shot.png")
    assert pixels[_rgb(NODE_BAR_COLOUR)] > 1000
    assert pixels[_rgb(BAR_COLOUR)] > 1000


def test_chromium_draws_the_defrag_report(tmp_path: Path) -> None:
    page = tmp_path / "defrag.html"
    snapshot = DATA / "fragmented.yaml"
    result = run_cli("-s", snapshot, "--defrag", "--gpu-policy", "binpack", "--report", page)
    assert result.code == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    assert "kubectl delete pod -n lab notebook" in html
    pixels = _screenshot(page, tmp_path / "shot.png")
    cards = 5  # fragmented.yaml: two nodes of two cards, one of one
    heat = sum(pixels[_rgb(c)] for c in HEAT_COLOURS)
    assert heat >= 2 * cards * CELL_AREA * 0.7, heat  # the maps before and after drew every card
