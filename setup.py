"""Package list for the fixed layout: shared/ -> runtrail, services/ -> runtrail_services.

``pyproject.toml`` holds all metadata; this file only enumerates sub-packages under their
mapped names, which ``[tool.setuptools.packages.find]`` cannot do for a renamed directory.
"""

from setuptools import find_packages, setup


def mapped(directory: str, name: str) -> list[str]:
    return [name] + [f"{name}.{sub}" for sub in find_packages(directory)]


setup(
    packages=mapped("shared", "runtrail")
    + mapped("services", "runtrail_services")
    + ["runtrail_schemas"],
)
