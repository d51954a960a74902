"""Import names match folders (issue 14 item 4): each top folder is a source root holding the
real package it imports as, and the editable install is a plain path entry static tools follow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: import name -> its source root (the top folder of the design that holds it)
PACKAGES = {
    "runtrail": "shared",
    "runtrail_services": "services",
    "runtrail_schemas": "schemas",
    "runtrail_tools": "tools",
}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: run outside the checkout (no cwd on sys.path): what the interpreter finds for each package
PROBE = """
import importlib.machinery, importlib.util, inspect, json, sys
names = sys.argv[1:]
out = {}
for name in names:
    finders = [f for f in sys.meta_path if getattr(f, "find_spec", None)
               and f.find_spec(name, None) is not None]
    spec = importlib.util.find_spec(name)
    module = importlib.import_module(name)
    out[name] = {
        "file": inspect.getfile(module),
        "locations": list(spec.submodule_search_locations or []),
        "finder": ["PathFinder" if f is importlib.machinery.PathFinder else repr(f)
                   for f in finders][:1],
        "path_entries": [p for p in sys.path if p and spec.origin.startswith(p.rstrip("/") + "/")],
    }
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    outside = tmp_path_factory.mktemp("outside")
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *PACKAGES],
        cwd=outside,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    result: dict[str, dict[str, object]] = json.loads(run.stdout)
    return result


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_resolves_to_its_folder_in_the_checkout(
    resolved: dict[str, dict[str, object]], name: str
) -> None:
    folder = ROOT / PACKAGES[name] / name
    assert resolved[name]["file"] == str(folder / "__init__.py")
    assert resolved[name]["locations"] == [str(folder)]


@pytest.mark.parametrize("name", PACKAGES)
def test_found_by_a_plain_path_entry_not_an_import_hook(
    resolved: dict[str, dict[str, object]], name: str
) -> None:
    """The standard path finder finds each package on the source root's sys.path entry: no
    editable-install finder in ``sys.meta_path`` (static tools cannot run one)."""
    assert resolved[name]["finder"] == ["PathFinder"]
    assert resolved[name]["path_entries"] == [str(ROOT / PACKAGES[name])]


def test_the_editable_install_is_a_static_pth_of_the_source_roots() -> None:
    dist = metadata.distribution("runtrail")
    pths = [f for f in dist.files or [] if f.suffix == ".pth"]
    assert len(pths) == 1, pths
    lines = Path(str(dist.locate_file(pths[0]))).read_text(encoding="utf-8").split()
    assert not [line for line in lines if line.startswith("import")]  # no code, no hook
    assert sorted(lines) == sorted(str(ROOT / root) for root in PACKAGES.values())


def test_the_wheel_ships_the_packages_as_they_lie() -> None:
    wheel = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == [f"{root}/{name}" for name, root in PACKAGES.items()]
    assert not {"sources", "force-include", "only-include"} & set(wheel)  # no name mapping


def test_no_setup_py_no_symlink_farm() -> None:
    assert not (ROOT / "setup.py").exists()
    assert not (ROOT / "setup.cfg").exists()
    assert not (ROOT / ".typecheck").exists()
    links = [p for root in PACKAGES.values() for p in (ROOT / root).rglob("*") if p.is_symlink()]
    assert links == []


def test_mypy_config_names_the_source_roots_themselves() -> None:
    config = PYPROJECT["tool"]["mypy"]
    roots = config["mypy_path"].split(":")
    assert roots == list(PACKAGES.values())
    for root in roots:
        assert (ROOT / root).is_dir() and not (ROOT / root).is_symlink()
    assert set(config["packages"]) <= set(PACKAGES)


@pytest.mark.parametrize("use_mypy_path", [True, False], ids=["mypy_path", "editable-pth"])
def test_mypy_resolves_the_packages_to_the_checkout(tmp_path: Path, use_mypy_path: bool) -> None:
    """mypy finds each package in its folder, through the project's ``mypy_path`` and, like
    any static tool, through the editable install's .pth alone."""
    roots = PYPROJECT["tool"]["mypy"]["mypy_path"].split(":")
    lines = ["[mypy]", "follow_imports = skip", f"python_executable = {sys.executable}"]
    if use_mypy_path:
        lines.append("mypy_path = " + ":".join(str(ROOT / root) for root in roots))
    config = tmp_path / "mypy.ini"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mypy = [sys.executable, "-m", "mypy", "--config-file", str(config), "--no-incremental", "-v"]
    run = subprocess.run(
        [*mypy, "--cache-dir", str(tmp_path / "cache"), "-c", "import " + ", ".join(PACKAGES)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    for name, root in PACKAGES.items():
        assert f"{ROOT / root / name / '__init__.py'} ({name})" in run.stderr
