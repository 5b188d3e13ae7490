"""Installs: the ``unilab-lit`` console script, the shipped configs and the license of a wheel;
the callbacks as ``unilab_lit.callbacks`` (no top-level ``callbacks``) in a wheel and an editable
install alike."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import yaml

from tests.conftest import REPO

# What a wheel is built from; a copy keeps build/ and *.egg-info out of the checkout.
_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "unilab_lit", "callbacks", "configs")


def _site_packages(env_dir: Path) -> Path:
    """The site-packages folder of the virtualenv at ``env_dir``."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return env_dir / "lib" / version / "site-packages"


def _installed_venv(tmp_path: Path, editable: bool = False) -> Path:
    """A virtualenv with the project installed from a copy of this checkout (as a wheel, or
    ``pip install -e``)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in _SOURCES:
        if (REPO / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(REPO / name, source / name)
    env_dir = tmp_path / "venv"
    # torch, Lightning, pip and setuptools come from this interpreter's site-packages (a .pth
    # file lists them): nothing is downloaded. Not ``system_site_packages``: inside a
    # virtualenv that is the base interpreter's, without the virtualenv's own packages.
    venv.create(env_dir, with_pip=False)
    (_site_packages(env_dir) / "running_interpreter.pth").write_text(
        "".join(f"{path}\n" for path in site.getsitepackages())
    )
    subprocess.run(
        [env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--no-index", *(["-e"] if editable else []), str(source)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    return env_dir


def test_installed_console_script_finds_a_shipped_config_by_name_from_an_empty_directory(
    tmp_path,
):
    env_dir = _installed_venv(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    printed = subprocess.run(
        [env_dir / "bin" / "unilab-lit", "fit", "--config", "appo.yaml", "--print_config"],
        cwd=empty, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr[-4000:]
    config = yaml.safe_load(printed.stdout)
    assert config["model"]["class_path"] == "unilab_lit.algos.appo.APPO"
    assert config["data"]["init_args"]["collector"]["task"]["class_path"] == "CartpoleSwingup"

    # The package and its configs come from the venv, not from this checkout.
    located = subprocess.run(
        [env_dir / "bin" / "python", "-c",
         "import unilab_lit.app.cli_io as m; print(m.find_config('appo.yaml'))"],
        cwd=empty, env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    shipped = Path(located.stdout.strip())
    assert shipped.is_file() and env_dir in shipped.parents
    licenses = list(
        (env_dir / "lib").glob("python*/site-packages/unilab_lit-*.dist-info/**/LICENSE")
    )
    assert licenses and "Apache License" in licenses[0].read_text()

    # The callbacks are unilab_lit.callbacks: the wheel holds no top-level package of that name.
    (record,) = _site_packages(env_dir).glob("unilab_lit-*.dist-info/RECORD")
    files = [line.split(",")[0] for line in record.read_text().splitlines()]
    assert "unilab_lit/callbacks/env_step_budget.py" in files
    assert not [f for f in files if f.split("/")[0] == "callbacks"]


def test_editable_install_imports_the_callbacks_under_the_librarys_name_only(tmp_path):
    env_dir = _installed_venv(tmp_path, editable=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import importlib.util, unilab_lit.callbacks as c; "
        "print(c.__file__); print(importlib.util.find_spec('callbacks'))"
    )
    found = subprocess.run(
        [env_dir / "bin" / "python", "-c", code],
        cwd=empty, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr[-4000:]
    location, top_level = found.stdout.split()
    assert Path(location).resolve() == (tmp_path / "source" / "callbacks" / "__init__.py").resolve()
    assert top_level == "None"
