"""Files from RGB frames: an MP4 or animated GIF streamed frame by frame, a PNG strip.

:class:`ClipWriter` encodes each frame the moment it arrives (MP4: an ffmpeg process through
imageio-ffmpeg; GIF: Pillow's frame-by-frame GIF writer, each frame with its own palette), so
a clip of any length holds one frame in memory; :class:`StripFrames` keeps a bounded sample of
a stream for a strip.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import imageio.v3 as iio
import imageio_ffmpeg
import numpy as np
from PIL import GifImagePlugin, Image

from unilab_lit.checkpoint_io import partial_file
from unilab_lit.validation import check_arg

# libx264's yuv420p needs even sizes; imageio-ffmpeg resizes to a multiple of this (not 16,
# its default, which would rescale a 640x480 frame).
_MACRO_BLOCK = 2
_SUFFIXES = (".mp4", ".gif")


class _Mp4Encoder:
    """H.264 through an ffmpeg process; each frame goes down its pipe."""

    def __init__(self, path: Path, width: int, height: int, fps: float) -> None:
        self._frames = imageio_ffmpeg.write_frames(
            str(path),
            (width, height),
            fps=fps,
            codec="libx264",
            macro_block_size=_MACRO_BLOCK,
            ffmpeg_log_level="error",
            # The file is the clip's partial name, whose suffix tells ffmpeg nothing.
            output_params=["-f", "mp4"],
        )
        self._frames.send(None)  # starts ffmpeg

    def send(self, frame: np.ndarray) -> None:
        self._frames.send(frame)

    def close(self) -> None:
        self._frames.close()


class _GifEncoder:
    """An endlessly looping GIF written frame by frame, each with its own 256-colour palette."""

    def __init__(self, file: IO[bytes], fps: float) -> None:
        # GIF delays are in hundredths of a second.
        self._duration_ms = 10 * round(100.0 / fps)
        self._file = file
        self._started = False

    def send(self, frame: np.ndarray) -> None:
        image = Image.fromarray(frame).quantize(256)
        if not self._started:
            info = {"loop": 0, "duration": self._duration_ms}
            header, _ = GifImagePlugin.getheader(image, info=info)
            self._file.write(b"".join(header))
            self._started = True
        data = GifImagePlugin.getdata(image, duration=self._duration_ms, include_color_table=True)
        self._file.write(b"".join(data))

    def close(self) -> None:
        try:
            self._file.write(b";")  # the GIF trailer
        finally:
            self._file.close()


class ClipWriter:
    """An MP4 or GIF file that frames are streamed into, one at a time, as they are rendered.

    The encoder starts with the first frame (which fixes the size) and writes into a hidden
    :func:`~unilab_lit.checkpoint_io.partial_file` beside ``path``, renamed over ``path`` when
    the clip is finished. Use it as a context manager: a block that fails, or a clip without
    frames, removes the partial file and leaves ``path`` as it was; a killed writer's partial
    file carries its pid (``unilab_lit.app.play`` removes dead writers' ones at its start).

    Args:
        path: Target file; ``.mp4`` (H.264) or ``.gif`` (endlessly looping).
        fps: Frames per second of playback (> 0).

    Raises:
        ValueError: If ``fps`` is not positive or the suffix is neither ``.mp4`` nor ``.gif``.
    """

    def __init__(self, path: str | Path, fps: float) -> None:
        check_arg(fps > 0, "ClipWriter: fps", fps, "> 0")
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in _SUFFIXES:
            raise ValueError(f"ClipWriter: {self.path} is neither .mp4 nor .gif")
        self.fps = fps
        self.frames_written = 0
        self._suffix = suffix
        self._size: tuple[int, int] | None = None
        self._encoder: _Mp4Encoder | _GifEncoder | None = None
        self._partial: Path | None = None

    def append(self, frame: np.ndarray) -> None:
        """Encode one ``[H, W, 3]`` uint8 frame (every frame has the first one's size).

        Raises:
            ValueError: If the frame's size differs from the first frame's.
            OSError: If the file cannot be written.
        """
        frame = np.ascontiguousarray(frame, dtype=np.uint8)
        height, width = frame.shape[:2]
        if self._encoder is None:
            self._start(width, height)
        elif (width, height) != self._size:
            raise ValueError(f"ClipWriter: frame of {width}x{height}, the clip is {self._size}")
        self._encoder.send(frame)
        self.frames_written += 1

    def close(self) -> None:
        """Finish the file (flushes ffmpeg and waits for it).

        Raises:
            ValueError: If no frame was written (nothing is written).
            OSError: If the encoder failed (the partial file is removed).
        """
        if self._encoder is None:
            raise ValueError(f"ClipWriter: no frames to write to {self.path}")
        encoder, self._encoder = self._encoder, None
        try:
            encoder.close()
            os.replace(self._partial, self.path)
        finally:
            self._discard_partial()

    def __enter__(self) -> ClipWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        if self._encoder is not None:
            encoder, self._encoder = self._encoder, None
            # The block's own error is the one to raise, not the encoder's on the way out.
            with contextlib.suppress(Exception):
                encoder.close()
        self._discard_partial()

    def _start(self, width: int, height: int) -> None:
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"ClipWriter: no directory {self.path.parent}")
        file, self._partial = partial_file(self.path)
        if self._suffix == ".gif":
            self._encoder = _GifEncoder(file, self.fps)
        else:
            file.close()  # ffmpeg opens the path itself
            self._encoder = _Mp4Encoder(self._partial, width, height, self.fps)
        self._size = (width, height)

    def _discard_partial(self) -> None:
        if self._partial is not None:
            self._partial.unlink(missing_ok=True)
            self._partial = None


def write_clip(path: str | Path, frames: Iterable[np.ndarray], fps: float) -> int:
    """Stream ``frames`` (each ``[H, W, 3]`` uint8; a generator is consumed lazily) into an MP4
    or GIF at ``fps``; returns the frame count.

    Raises:
        ValueError: If there are no frames, ``fps`` is not positive or the suffix is unknown.
        OSError: If the file cannot be written (a half-written one is removed).
    """
    with ClipWriter(path, fps) as writer:
        for frame in frames:
            writer.append(frame)
    return writer.frames_written


def gif_bytes(frames: Iterable[np.ndarray], fps: float) -> bytes:
    """An endlessly looping animated GIF of ``frames`` at ``fps`` (what TensorBoard shows as video).

    Raises:
        ValueError: If there are no frames or ``fps`` is not positive.
    """
    with tempfile.TemporaryDirectory(prefix="unilab_gif_") as scratch:
        path = Path(scratch) / "clip.gif"
        write_clip(path, frames, fps)
        return path.read_bytes()


class StripFrames:
    """A bounded, evenly spaced sample of a frame stream, for :func:`strip`.

    Keeps every ``spacing``-th frame and the latest one; when more than ``2 * count`` are kept,
    every other one is dropped and the spacing doubles. So it holds at most ``2 * count + 1``
    frames whatever the stream's length, and the first and the last frame are always in it.

    Args:
        count: Frames the strip will show (>= 1).
    """

    def __init__(self, count: int) -> None:
        check_arg(count >= 1, "StripFrames: count", count, ">= 1")
        self.count = count
        self._kept: list[np.ndarray] = []
        self._spacing = 1
        self._seen = 0
        self._last: np.ndarray | None = None

    def append(self, frame: np.ndarray) -> None:
        """Offer the next frame of the stream."""
        frame = np.asarray(frame, dtype=np.uint8)
        if self._seen % self._spacing == 0:
            self._kept.append(frame)
            if len(self._kept) > 2 * self.count:
                self._kept = self._kept[::2]
                self._spacing *= 2
        self._seen += 1
        self._last = frame

    @property
    def frames(self) -> list[np.ndarray]:
        """The kept frames in stream order, the latest frame last."""
        if self._last is None:
            return []
        if self._kept[-1] is self._last:
            return list(self._kept)
        return [*self._kept, self._last]


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
