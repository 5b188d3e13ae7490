"""Block ownership: owner-only unlink, and nothing of ours left in /dev/shm on any exit path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from unilab_lit.ipc import SHM_PREFIX, ShmBlock, list_segments, owned_names, unlink_all_owned

# An owner process: creates blocks, optionally lets a spawn child attach, then ends the way
# argv[1] says once the test writes a line (or signals it). It prints its pid once
# everything exists.
OWNER = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys
    import torch
    from unilab_lit.ipc import NOT_PUBLISHED, ReplayStorage, RolloutRing, SharedWeights, rollout_fields

    def collector(weights, ring, replay, crash):
        out = torch.empty(weights.num_floats)
        assert weights.read_if_newer(NOT_PUBLISHED, out) == 0
        ring.begin_write()["reward"].fill_(1.0)
        ring.commit_write()
        replay.write(torch.full((40, 3), 2.0))
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)

    if __name__ == "__main__":
        # Python's own SIGINT handling, whatever the test process passed down: pytest started in
        # the background by a non-interactive shell (`pytest &`, `nohup`) runs with SIGINT
        # ignored, which the owner would inherit and outlive the signal.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        mode = sys.argv[1]
        weights = SharedWeights(1000)
        weights.publish(torch.zeros(1000))
        ring = RolloutRing(2, rollout_fields(4, 2, 3, 3, 1))
        replay = ReplayStorage(64, {"obs": 3})
        if mode in ("normal", "collector_sigkill"):
            child = multiprocessing.get_context("spawn").Process(
                target=collector, args=(weights, ring, replay, mode == "collector_sigkill"))
            child.start()
            child.join()
            assert child.exitcode == (-signal.SIGKILL if mode == "collector_sigkill" else 0)
            assert len(ring.read_available()) == 1
            assert replay.write_ptr == 40 and bool((replay.rows[:40] == 2.0).all())
        print(os.getpid(), flush=True)
        sys.stdin.readline()  # the test has seen our segments; now end
        if mode == "exception":
            raise RuntimeError("learner failed")
    """
)


def _run_owner(
    tmp_path: Path, mode: str, send: signal.Signals | None = None
) -> tuple[int, int, str]:
    # A file, not -c: the spawn child re-imports the main module to find ``collector``.
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line:
        pytest.fail(f"owner process failed before it was ready:\n{proc.communicate()[1]}")
    pid = int(line)
    assert len(list_segments(pid)) == 3
    if send is not None:
        # The signal alone ends the owner (blocked on stdin): no "go" line it could read first.
        os.kill(pid, send)
        proc.wait(timeout=60)
    # communicate() returns once every holder of the pipes, the resource tracker included,
    # has exited, so anything the tracker would warn about is in stderr by then.
    _, stderr = proc.communicate(None if send is not None else "go\n", timeout=60)
    return pid, proc.returncode, stderr


@pytest.mark.parametrize(
    ("mode", "send", "exit_ok"),
    [
        ("normal", None, True),
        ("collector_sigkill", None, True),
        ("exception", None, False),
        ("sigint", signal.SIGINT, False),
        ("sigterm", signal.SIGTERM, False),
    ],
)
def test_owner_exit_path_leaves_no_segments_and_no_tracker_warnings(
    tmp_path: Path, mode: str, send: signal.Signals | None, exit_ok: bool
) -> None:
    pid, returncode, stderr = _run_owner(tmp_path, mode, send)
    assert (returncode == 0) == exit_ok, stderr
    if send is signal.SIGTERM:
        assert returncode == -signal.SIGTERM  # still dies by the signal after cleaning up
    assert list_segments(pid) == []
    assert "resource_tracker" not in stderr and "leaked" not in stderr, stderr


def test_sigkilled_owner_segments_are_reclaimed_by_the_resource_tracker(tmp_path: Path) -> None:
    pid, returncode, stderr = _run_owner(tmp_path, "sigkill", signal.SIGKILL)
    assert returncode == -signal.SIGKILL
    assert list_segments(pid) == []
    assert "leaked shared_memory" in stderr


def test_sigterm_cleanup_chains_to_the_previous_handler() -> None:
    script = textwrap.dedent(
        """
        import os, signal
        calls = []
        signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
        from unilab_lit.ipc import SharedWeights, list_segments
        weights = SharedWeights(10)
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [signal.SIGTERM], calls
        assert list_segments(os.getpid()) == []
        print("graceful")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "graceful"


def test_unlink_is_idempotent_and_attachers_never_unlink() -> None:
    owner = ShmBlock.create(128, "t")
    assert owner.name.startswith(f"{SHM_PREFIX}{os.getpid()}_t_")
    attached = ShmBlock.attach(owner.handle)
    attached.view(0, (4,), torch.int64)[:] = 7
    assert owner.view(0, (4,), torch.int64).tolist() == [7, 7, 7, 7]
    attached.unlink()
    assert owner.name in list_segments()
    owner.unlink()
    owner.unlink()
    assert owner.name not in list_segments() and owner.name not in owned_names()
    with pytest.raises(FileNotFoundError):
        ShmBlock.attach(owner.handle)
    # Memory stays mapped for views that outlive the name.
    assert attached.view(0, (4,), torch.int64).tolist() == [7, 7, 7, 7]


def test_views_outlive_close_and_owner_garbage_collection_unlinks() -> None:
    block = ShmBlock.create(64, "t")
    name, view = block.name, block.view(0, (8,), torch.float64)
    block.close()
    with pytest.raises(RuntimeError, match="closed"):
        block.view(0, (1,), torch.float64)
    del block
    assert name not in list_segments()
    view.fill_(1.5)  # the mapping is still alive: no crash, memory still writable
    assert view.sum() == 12.0


def test_forked_child_does_not_unlink_the_parents_segments() -> None:
    block = ShmBlock.create(64, "t")
    pid = os.fork()
    if pid == 0:
        unlink_all_owned()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert block.name in list_segments()
    block.unlink()


def test_view_outside_the_block_is_rejected() -> None:
    block = ShmBlock.create(64, "t")
    with pytest.raises(ValueError, match="does not fit"):
        block.view(32, (5,), torch.float64)
    with pytest.raises(ValueError, match="nbytes must be > 0"):
        ShmBlock.create(0, "t")
    block.unlink()
