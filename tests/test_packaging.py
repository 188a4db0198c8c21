"""What setuptools warns about at install, checked without building: every importable folder that
ships files is listed in `packages`, and `project.license` is an SPDX string."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP = {"__pycache__"}


def _shipped_folders() -> dict[str, Path]:
    """Package name -> folder, for every folder under a package root that holds files."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    roots = {"verillm": ROOT / "verillm", **{name: ROOT / folder for name, folder in setuptools["package-dir"].items()}}
    found = {}
    for name, folder in roots.items():
        for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
            relative = path.relative_to(folder).parts
            if SKIP & set(relative) or not any(f.is_file() for f in path.iterdir()):
                continue
            found[".".join((name, *relative))] = path
    return found


def test_every_folder_that_ships_files_is_a_listed_package():
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    missing = sorted(set(_shipped_folders()) - packages)
    assert missing == [], f"add to [tool.setuptools] packages (setuptools warns otherwise): {missing}"


def test_package_data_of_each_listed_data_folder_matches_its_files():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]
    for package, folder in _shipped_folders().items():
        files = [f for f in folder.iterdir() if f.is_file() and f.suffix not in (".py", ".pyc")]
        if files and package in ("verillm.profiles", "verillm.node.api.explorer"):
            patterns = data.get(package, [])
            assert all(any(f.match(p) for p in patterns) for f in files), (package, files, patterns)


def test_license_is_an_spdx_string():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    build = " ".join(PYPROJECT["build-system"]["requires"])
    assert "setuptools>=77" in build  # the first setuptools that reads an SPDX string
