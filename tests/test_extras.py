"""runtrail.extras: a module only an extra installs is reported with the extra to install."""

from __future__ import annotations

import pytest

from runtrail.extras import EXTRAS, MissingExtra, explain, require


def test_a_missing_extra_module_names_the_extra() -> None:
    missing = explain(ModuleNotFoundError("No module named 'psycopg.pq'", name="psycopg.pq"), "x")
    assert isinstance(missing, MissingExtra)
    assert (missing.name, missing.extra) == ("psycopg", "postgres")
    assert str(missing) == "x needs psycopg: pip install 'runtrail[postgres]'"


def test_a_module_no_extra_provides_is_not_explained() -> None:
    with pytest.raises(ModuleNotFoundError) as caught:
        require("runtrail_no_such_module", "a feature")
    assert not isinstance(caught.value, MissingExtra)
    assert explain(caught.value) is None


def test_an_installed_module_is_returned() -> None:
    assert require("prometheus_client", "metrics").__name__ == "prometheus_client"


def test_every_extra_named_is_an_extra_of_the_distribution() -> None:
    from importlib import metadata

    provided = set(metadata.distribution("runtrail").metadata.get_all("Provides-Extra") or [])
    assert set(EXTRAS.values()) <= provided
