"""Files from RGB frames: MP4 (imageio with imageio-ffmpeg), a PNG strip, an animated GIF."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import imageio.v2 as imageio
import imageio.v3 as iio
import numpy as np

from unilab_lit.validation import check_arg

# libx264's yuv420p needs even sizes; imageio-ffmpeg resizes to a multiple of this (not 16,
# its default, which would rescale a 640x480 frame).
_MACRO_BLOCK = 2


def write_mp4(path: str | Path, frames: Sequence[np.ndarray] | np.ndarray, fps: float) -> None:
    """Encode ``frames`` (each ``[H, W, 3]`` uint8) as an H.264 MP4 at ``fps``.

    A file that fails half-way is removed, so a failed write leaves nothing behind.

    Raises:
        ValueError: If there are no frames or ``fps`` is not positive.
        OSError: If the file cannot be written.
    """
    _check_clip("write_mp4", frames, fps)
    path = Path(path)
    with (
        _removed_on_failure(path),
        imageio.get_writer(
            path, format="FFMPEG", mode="I", fps=fps, codec="libx264", macro_block_size=_MACRO_BLOCK
        ) as writer,
    ):
        for frame in frames:
            writer.append_data(np.asarray(frame, dtype=np.uint8))


def _check_clip(name: str, frames: Sequence[np.ndarray] | np.ndarray, fps: float) -> None:
    if len(frames) == 0:
        raise ValueError(f"{name}: no frames to write")
    check_arg(fps > 0, f"{name}: fps", fps, "> 0")


@contextlib.contextmanager
def _removed_on_failure(path: Path) -> Iterator[None]:
    """Removes ``path`` if the block fails, so a failed write leaves no half-written file."""
    try:
        yield
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def strip(frames: Sequence[np.ndarray] | np.ndarray, count: int) -> np.ndarray:
    """``count`` frames spread evenly over ``frames`` (first and last included), side by side.

    Raises:
        ValueError: If there are no frames or ``count`` is smaller than 1.
    """
    if len(frames) == 0 or count < 1:
        raise ValueError(f"strip: need frames and count >= 1, got {len(frames)} frames, {count=}")
    picks = np.linspace(0, len(frames) - 1, min(count, len(frames))).round().astype(int)
    return np.concatenate([np.asarray(frames[i], dtype=np.uint8) for i in picks], axis=1)


def write_png(path: str | Path, image: np.ndarray) -> None:
    """Write one ``[H, W, 3]`` uint8 image as PNG.

    Raises:
        OSError: If the file cannot be written.
    """
    iio.imwrite(Path(path), np.asarray(image, dtype=np.uint8), extension=".png")


def gif_bytes(frames: Sequence[np.ndarray] | np.ndarray, fps: float) -> bytes:
    """An endlessly looping animated GIF of ``frames`` at ``fps`` (what TensorBoard shows as video).

    Raises:
        ValueError: If there are no frames or ``fps`` is not positive.
    """
    _check_clip("gif", frames, fps)
    stacked = np.stack([np.asarray(frame, dtype=np.uint8) for frame in frames])
    return iio.imwrite("<bytes>", stacked, extension=".gif", duration=1000.0 / fps, loop=0)


def write_gif(path: str | Path, frames: Sequence[np.ndarray] | np.ndarray, fps: float) -> None:
    """Write :func:`gif_bytes` of ``frames`` to ``path`` (the GIFs a README shows).

    Raises:
        ValueError: If there are no frames or ``fps`` is not positive.
        OSError: If the file cannot be written (a half-written one is removed).
    """
    data = gif_bytes(frames, fps)
    path = Path(path)
    with _removed_on_failure(path):
        path.write_bytes(data)
