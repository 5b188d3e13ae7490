"""``python -m unilab_lit.app.play``: a trained checkpoint's return, its video, and bad input."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import weakref

import imageio.v2 as imageio
import imageio.v3 as iio
import numpy as np
import pytest
import torch

from tests.conftest import REPO
from unilab_lit.app.play import PlayOutputs, main, play, tracking_report
from unilab_lit.app.trained_run import load_trained_run
from unilab_lit.envs.joystick import TRACKING_METRICS
from unilab_lit.envs.policy_episodes import EpisodeResults, run_episodes
from unilab_lit.telemetry import video

EPISODE_STEPS = 500  # CartpoleSwingup's time limit


def test_play_writes_an_mp4_of_env0_that_reads_back(appo_cartpole_run, tmp_path):
    out = tmp_path / "cartpole.mp4"
    completed = subprocess.run(
        [
            sys.executable, "-m", "unilab_lit.app.play",
            "--ckpt_path", "last", "--run_dir", str(appo_cartpole_run),
            "--num_envs", "2", "--episodes", "2",
            "--video", str(out), "--width", "160", "--height", "120",
        ],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "mean return" in completed.stdout and "mean episode length 500.0" in completed.stdout
    reader = imageio.get_reader(out)
    meta = reader.get_meta_data()
    frames = list(reader.iter_data())
    reader.close()
    # Env 0's one episode, a frame every 5th step (the default stride), played at real time.
    assert len(frames) == EPISODE_STEPS // 5
    assert meta["size"] == (160, 120) and meta["fps"] == 10  # 1 / (0.02 s x 5)
    assert "frames" not in completed.stderr  # no progress bar when stderr is not a terminal
    spread = np.stack(frames[::12]).astype(np.float32).std(axis=0).mean()
    assert spread > 1.0, "the frames are (nearly) all identical"


@pytest.mark.parametrize(
    ("stride", "max_frames", "expected"),
    [("25", None, EPISODE_STEPS // 25), ("5", "12", 12)],
)
def test_play_writes_a_gif_of_every_kth_step_up_to_max_frames(
    stride, max_frames, expected, appo_cartpole_run, tmp_path, capsys
):
    out = tmp_path / "cartpole.gif"
    cap = [] if max_frames is None else ["--max_frames", max_frames]
    status = main(["--ckpt_path", "last", "--run_dir", str(appo_cartpole_run),
                   "--num_envs", "1", "--episodes", "1", "--gif", str(out),
                   "--frame_stride", stride, *cap, "--width", "80", "--height", "60"])  # fmt: skip
    assert status == 0, capsys.readouterr().err
    frames = iio.imread(out, index=None)
    assert frames.shape == (expected, 60, 80, 3)
    # Real time / stride: a frame stands for `stride` control steps of 0.02 s.
    assert iio.immeta(out)["duration"] == 20 * int(stride)
    assert f"({expected} frames recorded)" in capsys.readouterr().out


def _play_cartpole_video(run_dir, out, episodes: int) -> list[str]:
    """`python -m unilab_lit.app.play` of one env of the cart-pole run into the video `out`."""
    return [
        sys.executable, "-m", "unilab_lit.app.play",
        "--ckpt_path", "last", "--run_dir", str(run_dir),
        "--num_envs", "1", "--episodes", str(episodes),
        "--video", str(out), "--width", "48", "--height", "32",
    ]  # fmt: skip


def test_play_killed_mid_clip_leaves_no_clip_and_the_next_play_removes_its_partial_file(
    appo_cartpole_run, tmp_path
):
    """SIGKILL of the whole process group (play and its ffmpeg) while the clip is half encoded:
    no file appears under the clip's name, only the hidden pid-named partial one, which the
    next play into the same directory removes before it writes the whole clip."""
    out = tmp_path / "clip.mp4"
    player = subprocess.Popen(
        _play_cartpole_video(appo_cartpole_run, out, episodes=50),
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any(p.stat().st_size for p in tmp_path.glob(".clip.mp4.*.partial")):
            assert player.poll() is None, "play ended before it was killed"
            assert time.monotonic() < deadline, "play never started its clip"
            time.sleep(0.2)
    finally:
        os.killpg(player.pid, signal.SIGKILL)
        player.wait(timeout=30)
    (partial,) = tmp_path.glob(".clip.mp4.*.partial")
    assert f".{player.pid}." in partial.name and not out.exists()

    completed = subprocess.run(
        _play_cartpole_video(appo_cartpole_run, out, episodes=1),
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert not partial.exists() and [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]
    assert len(iio.imread(out, index=None)) == EPISODE_STEPS // 5


def test_play_streams_each_frame_to_every_file_as_it_is_rendered(
    appo_cartpole_run, tmp_path, monkeypatch
):
    """Frames reach the MP4 and GIF encoders during the episode, and at most a small constant
    number of them is alive at any time (the strip's bounded sample included). Reference
    counting alone decides "alive" (as in tests/test_video.py): no collection per frame."""
    appended: list[weakref.ref] = []
    most_alive = 0
    real_append = video.ClipWriter.append

    def append(writer: video.ClipWriter, frame: np.ndarray) -> None:
        nonlocal most_alive
        if writer.path.suffix == ".mp4":  # the GIF gets the same frame objects
            most_alive = max(most_alive, sum(ref() is not None for ref in appended))
            appended.append(weakref.ref(frame))
        real_append(writer, frame)

    monkeypatch.setattr(video.ClipWriter, "append", append)
    outputs = PlayOutputs(
        video=tmp_path / "c.mp4",
        gif=tmp_path / "c.gif",
        strip=tmp_path / "c.png",
        strip_frames=3,
        width=48,
        height=32,
        frame_stride=2,
    )
    run = load_trained_run("last", appo_cartpole_run)
    results = play(run, num_envs=1, episodes=1, outputs=outputs)
    frames = EPISODE_STEPS // 2
    assert results.frames_recorded == frames and len(appended) == frames
    # The strip's sample (2 x 3 + 1), the encoders' last inputs and the frame being rendered.
    assert most_alive <= 2 * 3 + 1 + 3, most_alive
    assert iio.imread(tmp_path / "c.gif", index=None).shape == (frames, 32, 48, 3)
    assert iio.imread(tmp_path / "c.png").shape == (32, 3 * 48, 3)


def test_play_unknown_camera_is_one_line_naming_the_models_cameras(
    appo_cartpole_run, tmp_path, capsys
):
    out = tmp_path / "cartpole.gif"
    status = main(["--ckpt_path", "last", "--run_dir", str(appo_cartpole_run),
                   "--num_envs", "1", "--episodes", "1", "--gif", str(out),
                   "--camera", "nope", "--width", "80", "--height", "60"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "'fixed'" in err, err
    assert not out.exists()


def test_play_scores_above_a_random_policy_after_a_short_fit(appo_cartpole_run):
    run = load_trained_run("last", appo_cartpole_run)
    trained = play(run, num_envs=4, episodes=4, seed=3)
    env = run.task.build(4)
    generator = torch.Generator().manual_seed(0)
    random = run_episodes(
        env, lambda obs: torch.rand(obs.shape[0], 1, generator=generator) * 2 - 1, 4, seed=3
    )
    env.close()
    assert trained.mean_return > random.mean_return + 20.0, (
        trained.mean_return,
        random.mean_return,
    )


def test_play_stochastic_runs_the_sampling_policy(appo_cartpole_run, capsys):
    status = main(["--ckpt_path", "last", "--run_dir", str(appo_cartpole_run),
                   "--num_envs", "2", "--episodes", "2", "--stochastic"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0 and "(stochastic)" in out
    assert "tracking error" not in out  # not a joystick task


def test_tracking_report_gives_each_error_as_a_multiple_of_standing_stills():
    lin, yaw = TRACKING_METRICS
    results = EpisodeResults(
        returns=np.zeros(2),
        lengths=np.full(2, 1000),
        metrics={lin: np.array([0.2, 0.1]), yaw: np.array([0.3, 0.3])},
        standing_still={lin: np.array([0.5, 0.3]), yaw: np.array([0.6, 0.6])},
    )
    assert tracking_report(results) == (
        "lin tracking error 0.150 m/s (0.375x standing still's 0.400 m/s)\n"
        "yaw tracking error 0.300 rad/s (0.500x standing still's 0.600 rad/s)\n"
    )
    assert tracking_report(EpisodeResults(np.zeros(1), np.ones(1))) == ""


@pytest.mark.parametrize(
    "case", ["missing checkpoint", "no config", "missing directory", "directory as output"]
)
def test_play_bad_input_gives_one_line_error_and_writes_nothing(
    case, appo_cartpole_run, checkpoint_without_config, tmp_path, capsys
):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "taken.mp4").mkdir()
    ckpt, video = {
        "missing checkpoint": (tmp_path / "nope.ckpt", out_dir / "v.mp4"),
        "no config": (checkpoint_without_config, out_dir / "v.mp4"),
        "missing directory": ("last", out_dir / "missing" / "v.mp4"),
        "directory as output": ("last", out_dir / "taken.mp4"),
    }[case]
    status = main(["--ckpt_path", str(ckpt), "--run_dir", str(appo_cartpole_run),
                   "--episodes", "1", "--num_envs", "1", "--video", str(video)])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert sorted(p.name for p in out_dir.rglob("*")) == ["taken.mp4"]


@pytest.fixture
def two_experiments(appo_cartpole_run, tmp_path):
    """A ``runs`` directory with the fit's run under two experiment names."""
    runs = tmp_path / "runs"
    shutil.copytree(appo_cartpole_run, runs)
    shutil.copytree(runs / "appo_cartpole", runs / "appo_other")
    return runs


def test_play_last_refuses_two_experiments_in_one_line_and_plays_the_named_run(
    two_experiments, tmp_path, capsys
):
    quick = ["--ckpt_path", "last", "--episodes", "1", "--num_envs", "1"]
    assert main([*quick, "--run_dir", str(two_experiments)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --ckpt_path last is ambiguous") and err.count("\n") == 1, err
    for name in ("appo_cartpole", "appo_other"):
        assert str(two_experiments / name / "version_0") in err

    chosen = two_experiments / "appo_other" / "version_0"
    assert main([*quick, "--run_dir", str(chosen)]) == 0
    assert str(chosen / "checkpoints" / "last.ckpt") in capsys.readouterr().out

    config = tmp_path / "other.yaml"
    config.write_text(
        "trainer:\n  logger:\n    init_args:\n"
        f"      save_dir: {two_experiments}\n      name: appo_other\n"
    )
    assert main([*quick, "--config", str(config)]) == 0
    assert str(chosen / "checkpoints" / "last.ckpt") in capsys.readouterr().out


def test_play_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: runs)" in shown and "(default: 16)" in shown
    # One default each, none that contradicts the flag it is on.
    assert "(default: None)" not in shown and "(default: True)" not in shown
    assert "frame width in pixels (default: 320)" in shown
    assert "frame height in pixels (default: 240)" in shown and "(default: 5;" in shown
    assert shown.count("(default: all)") == 1 and "(default: all) (default" not in shown
    assert shown.endswith("--stochastic sample actions as the collector does")
