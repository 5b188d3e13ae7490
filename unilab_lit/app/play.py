"""``python -m unilab_lit.app.play --ckpt_path PATH``: run a trained policy, report its return
(and on a joystick task its tracking errors against standing still's), film it.

The task, the algorithm and its observation normaliser are rebuilt from the checkpoint (see
:mod:`unilab_lit.app.trained_run`); frames are rendered offscreen (EGL, else OSMesa), so no display
is needed. Each frame is encoded as soon as it is rendered (:class:`~unilab_lit.telemetry.video.ClipWriter`),
so memory stays flat whatever the clip's length; a progress bar on stderr counts the frames.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from unilab_lit.app.cli_io import OutputError, check_output, checkpoint_parser, one_line
from unilab_lit.app.trained_run import RunLoadError, TrainedRun, load_trained_run
from unilab_lit.envs.joystick import TRACKING_METRICS
from unilab_lit.envs.policy_episodes import (
    EpisodeResults,
    FrameRecording,
    policy_actions,
    run_episodes,
)
from unilab_lit.ipc.reclaim import remove_dead_writers_files
from unilab_lit.telemetry import video
from unilab_lit.validation import check_arg

# Defaults that film a robot episode in about a minute on 2 cores under software OpenGL
# (a 320x240 Go1 frame costs ~0.73 CPU-seconds there; its 1000-step episode gives 200 frames
# at stride 5, played at 10 fps).
DEFAULT_WIDTH = 320
DEFAULT_HEIGHT = 240
DEFAULT_FRAME_STRIDE = 5
# How the report names each tracking error, and its unit.
_TRACKING_LABELS = dict(zip(TRACKING_METRICS, (("lin", "m/s"), ("yaw", "rad/s")), strict=True))


@dataclass(frozen=True)
class PlayOutputs:
    """Files ``play`` writes after the episodes: an MP4 and a GIF of env 0, a PNG strip of its frames.

    Args:
        video: MP4 path, or ``None``.
        gif: Animated GIF path, or ``None``.
        strip: PNG path, or ``None``.
        strip_frames: Frames side by side in the strip.
        width: Frame width in pixels.
        height: Frame height in pixels.
        frame_stride: Film every ``frame_stride``-th control step; the clips' frame rate is
            divided by it, so they still play at real time.
        max_frames: Frames to film at most; ``None`` films env 0's episodes in full.
        camera: A camera of the task's model; ``None`` takes its first (a tracking camera
            where it has none).
    """

    video: Path | None = None
    gif: Path | None = None
    strip: Path | None = None
    strip_frames: int = 5
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    frame_stride: int = DEFAULT_FRAME_STRIDE
    max_frames: int | None = None
    camera: str | None = None

    @property
    def wants_frames(self) -> bool:
        return any(path is not None for path in (self.video, self.gif, self.strip))


def play(
    run: TrainedRun,
    *,
    num_envs: int,
    episodes: int,
    seed: int = 0,
    deterministic: bool = True,
    outputs: PlayOutputs | None = None,
) -> EpisodeResults:
    """Run ``episodes`` whole episodes of the trained policy and write the requested files.

    Args:
        run: The trained run (:func:`~unilab_lit.app.trained_run.load_trained_run`).
        num_envs: Envs stepped together (>= 1).
        episodes: Episodes to finish (>= 1).
        seed: Seed of the envs' reset.
        deterministic: The deterministic action (normaliser folded in); ``False`` samples.
        outputs: Files to write from env 0's frames; ``None`` renders nothing.

    Raises:
        ValueError: If a count is out of range or the gymnasium env cannot render.
        RuntimeError: If frames are wanted and no OpenGL context can be created.
        OSError: If a file cannot be written (a half-written one is removed).
    """
    check_arg(num_envs >= 1, "num_envs", num_envs, ">= 1")
    check_arg(episodes >= 1, "episodes", episodes, ">= 1")
    outputs = outputs or PlayOutputs()
    task = run.task.with_frames() if outputs.wants_frames else run.task
    env = task.build(num_envs, seed=seed)
    act = policy_actions(run.model, deterministic)
    try:
        if not outputs.wants_frames:
            return run_episodes(env, act, episodes, seed=seed)
        # Real time divided by the stride: one frame stands for frame_stride control steps.
        fps = 1.0 / (env.spec.control_dt * outputs.frame_stride)
        with contextlib.ExitStack() as files:
            clips = [
                files.enter_context(video.ClipWriter(path, fps))
                for path in (outputs.video, outputs.gif)
                if path is not None
            ]
            strip = None if outputs.strip is None else video.StripFrames(outputs.strip_frames)
            bar = files.enter_context(
                tqdm(
                    total=_frames_expected(env.spec.max_episode_steps, num_envs, episodes, outputs),
                    desc="filming env 0",
                    unit="frame",
                    file=sys.stderr,
                    disable=None,  # quiet when stderr is not a terminal
                    leave=False,
                )
            )

            def sink(frame: np.ndarray) -> None:
                for clip in clips:
                    clip.append(frame)
                if strip is not None:
                    strip.append(frame)
                bar.update()

            record = FrameRecording(
                sink,
                outputs.width,
                outputs.height,
                outputs.max_frames,
                outputs.frame_stride,
                outputs.camera,
            )
            results = run_episodes(env, act, episodes, seed=seed, record=record)
            if strip is not None:
                video.write_png(outputs.strip, video.strip(strip.frames, outputs.strip_frames))
    finally:
        env.close()
    return results


def tracking_report(results: EpisodeResults) -> str:
    """One line per tracking error of a joystick task's episodes: its mean and its multiple of
    standing still's on the same commands (see :func:`~unilab_lit.envs.policy_episodes.run_episodes`),
    e.g. ``lin tracking error 0.214 m/s (0.371x standing still's 0.577 m/s)``; empty on
    another task."""
    lines = []
    for name, reference in results.standing_still.items():
        label, unit = _TRACKING_LABELS[name]
        ratio = results.vs_standing_still(name)
        versus = "" if ratio is None else f"{ratio:.3f}x "
        lines.append(
            f"{label} tracking error {np.mean(results.metrics[name]):.3f} {unit} "
            f"({versus}standing still's {np.mean(reference):.3f} {unit})\n"
        )
    return "".join(lines)


def _frames_expected(episode_steps: int, num_envs: int, episodes: int, outputs: PlayOutputs) -> int:
    """Frames of env 0's episodes if none ends before its timeout (the progress bar's total)."""
    steps = math.ceil(episodes / num_envs) * episode_steps
    frames = math.ceil(steps / outputs.frame_stride)
    return frames if outputs.max_frames is None else min(frames, outputs.max_frames)


def _parser() -> argparse.ArgumentParser:
    parser = checkpoint_parser(
        "python -m unilab_lit.app.play",
        "Run a trained policy from its checkpoint; print its mean return and "
        "episode length (on a joystick task, its tracking errors as multiples of standing "
        "still's); optionally film env 0 (MP4, GIF) or write a PNG strip of its frames.",
    )
    parser.add_argument("--num_envs", type=int, default=16, help="envs stepped together")
    parser.add_argument("--episodes", type=int, default=16, help="episodes to run in all")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs' reset")
    parser.add_argument("--video", help="write env 0's episodes to this .mp4 file")
    parser.add_argument("--gif", help="write env 0's episodes to this animated .gif file")
    parser.add_argument("--strip", help="write a .png strip of env 0's frames")
    parser.add_argument("--strip_frames", type=int, default=5, help="frames in the strip")
    parser.add_argument(
        "--width",
        type=int,
        default=DEFAULT_WIDTH,
        help="frame width in pixels (default: %(default)s)",
    )
    parser.add_argument(
        "--height",
        type=int,
        default=DEFAULT_HEIGHT,
        help="frame height in pixels (default: %(default)s)",
    )
    parser.add_argument(
        "--frame_stride",
        type=int,
        default=DEFAULT_FRAME_STRIDE,
        help="film every K-th control step; the clip's frame rate is 1 / (control_dt x K), so "
        "it plays at real time (default: %(default)s; with the default size a robot episode "
        "films in about a minute on 2 cores)",
    )
    parser.add_argument(
        "--max_frames", type=int, default=None, help="frames to film at most (default: all)"
    )
    parser.add_argument(
        "--camera",
        default=None,
        help="a camera of the task's model (default: its first; a tracking camera if it has none)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="act with the deterministic action (default)",
    )
    mode.add_argument(
        "--stochastic",
        dest="deterministic",
        action="store_false",
        help="sample actions as the collector does",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 with a one-line ``error:`` on bad input)."""
    args = _parser().parse_args(argv)
    try:
        for name in ("num_envs", "episodes", "strip_frames", "width", "height", "frame_stride"):
            if getattr(args, name) < 1:
                raise OutputError(f"--{name} must be >= 1, got {getattr(args, name)}")
        if args.max_frames is not None and args.max_frames < 1:
            raise OutputError(f"--max_frames must be >= 1, got {args.max_frames}")
        outputs = PlayOutputs(
            video=None if args.video is None else check_output(args.video, ".mp4", "--video"),
            gif=None if args.gif is None else check_output(args.gif, ".gif", "--gif"),
            strip=None if args.strip is None else check_output(args.strip, ".png", "--strip"),
            strip_frames=args.strip_frames,
            width=args.width,
            height=args.height,
            frame_stride=args.frame_stride,
            max_frames=args.max_frames,
            camera=args.camera,
        )
        # A play killed mid-clip left its hidden partial file (named with its pid) beside the clip.
        for clip in {path.parent for path in (outputs.video, outputs.gif) if path is not None}:
            remove_dead_writers_files(clip)
        run = load_trained_run(args.ckpt_path, args.run_dir, args.config)
        results = play(
            run,
            num_envs=args.num_envs,
            episodes=args.episodes,
            seed=args.seed,
            deterministic=args.deterministic,
            outputs=outputs,
        )
    except (OutputError, RunLoadError, ValueError, RuntimeError, OSError) as err:
        sys.stderr.write(f"error: {one_line(err)}\n")
        return 2
    mode = "deterministic" if args.deterministic else "stochastic"
    sys.stdout.write(
        f"{run.task.class_path} | {type(run.model).__name__} step {run.global_step} | {run.checkpoint}\n"
        f"mean return {results.mean_return:.2f} (std {np.std(results.returns):.2f}), "
        f"mean episode length {results.mean_length:.1f} over {len(results.returns)} "
        f"episodes ({mode})\n"
    )
    sys.stdout.write(tracking_report(results))
    for label, path in (("video", outputs.video), ("gif", outputs.gif), ("strip", outputs.strip)):
        if path is not None:
            sys.stdout.write(f"{label}: {path} ({results.frames_recorded} frames recorded)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
