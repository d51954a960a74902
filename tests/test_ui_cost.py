"""Cost per node and per run from the operator's price table (``--price-table``), in headless
Chromium: each priced MODEL node's card and the run header; a node whose model has no price
is said to be left out of the total, never summed as zero. A table that cannot be read stops
``runtrail ui`` at start, naming the file.

The run is the shape tests' (a ``gpt-x`` answer of 30 + 9 tokens, a ``fake-llm-1`` one of
12 + 5), its capture records written by capture's own pairer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.capture import JsonlFileSink, NodeIoRecord, NodePairer
from runtrail_tools.ui.cost import PriceTable, PriceTableError
from tests.capture_support import feed_all
from tests.test_ui_shape import TENANT, TOKENS, shaped_run
from tests.ui_stores import NO_BROKER, seed, serving
from tests.ui_support import shoot, sign_in, ui_env

#: "gpt-x" is priced by its longest prefix in the table ("gpt-"), not by "gpt"
PRICES_TOML = """
currency = "EUR"
[models."gpt"]
input = 100
output = 100
[models."gpt-"]
input = 2.5
output = 10
"""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, list[NodeIoRecord], Path]]:
    root = tmp_path_factory.mktemp("ui-cost")
    state = root / "state"
    state.mkdir()
    run = shaped_run("cost-1")
    seed(state, [run])
    records = feed_all(NodePairer(), run.events)
    sink = JsonlFileSink(state / "capture")
    sink.write(records)
    sink.close()
    table = root / "prices.toml"
    table.write_text(PRICES_TOML)
    with serving(state, TOKENS, root / "ui.log", "--price-table", str(table)) as url:
        yield url, records, state


def test_the_node_cards_and_the_run_header_show_the_cost(
    served: tuple[str, list[NodeIoRecord], Path], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    url, records, _ = served
    sign_in(browser, url, TOKENS[TENANT])
    browser.get(f"{url}/runs/cost-1")
    by_model = {r.model_id: r for r in records if r.node_type == "MODEL"}
    priced = browser.find_element(
        By.CSS_SELECTOR, f'.node[data-record="{by_model["gpt-x"].record_id}"] .cost'
    )
    assert priced.text == "0.000165 EUR"  # (30 * 2.5 + 9 * 10) / 1M
    unpriced = browser.find_element(
        By.CSS_SELECTOR, f'.node[data-record="{by_model["fake-llm-1"].record_id}"] .cost'
    )
    assert unpriced.text == "no price for fake-llm-1"
    tool = next(r for r in records if r.node_type == "TOOL")
    assert not browser.find_elements(
        By.CSS_SELECTOR, f'.node[data-record="{tool.record_id}"] .cost'
    )
    summary = browser.find_element(By.CSS_SELECTOR, "p.summary").text
    assert browser.find_element(By.ID, "run-cost").text == "0.000165 EUR"
    assert "(1 model node without a price left out)" in summary
    shoot(browser, tmp_path, "cost")


def test_without_a_table_no_cost_is_shown(
    served: tuple[str, list[NodeIoRecord], Path], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _, _, state = served
    with serving(state, TOKENS, tmp_path / "ui.log") as plain:
        sign_in(browser, plain, TOKENS[TENANT])
        browser.get(f"{plain}/runs/cost-1")
        assert len(browser.find_elements(By.CSS_SELECTOR, ".node .tokens")) == 2
        assert not browser.find_elements(By.ID, "run-cost")
        assert not browser.find_elements(By.CSS_SELECTOR, ".cost")


@pytest.mark.parametrize(
    ("text", "suffix", "said"),
    [
        ('{"models": {"m": {"input": 1}}}', ".json", "m.output is not a price"),
        ('{"models": {"m": {"input": -1, "output": 1}}}', ".json", "m.input is not a price"),
        ("models = 3", ".toml", "no `models` table"),
        ("[models", ".toml", "Expected"),
        (None, ".json", "No such file"),
    ],
)
def test_a_price_table_that_cannot_be_read_stops_the_explorer_at_start(
    text: str | None, suffix: str, said: str, tmp_path: Path
) -> None:
    table = tmp_path / f"prices{suffix}"
    if text is not None:
        table.write_text(text)
    with pytest.raises(PriceTableError, match=said):
        PriceTable.load(table)
    argv = [sys.executable, "-m", "runtrail_tools.cli.main", "ui", "--state-dir", str(tmp_path)]
    argv += ["--port", "0", "--bootstrap-servers", NO_BROKER, "--price-table", str(table)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=ui_env(tmp_path))
    assert done.returncode == 2
    assert str(table) in done.stderr and said in done.stderr
    assert "runtrail ui: http" not in done.stdout


def test_a_json_table_prices_exactly_before_by_prefix(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text(
        '{"models": {"m": {"input": 1, "output": 2}, "m-1": {"input": 3, "output": 4}}}'
    )
    prices = PriceTable.load(table)
    assert prices.currency == "USD"
    assert prices.price_of("m-1") == prices.prices["m-1"]
    assert prices.price_of("m-2") == prices.prices["m"]
    assert prices.price_of("n") is None and prices.price_of(None) is None
