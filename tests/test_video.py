"""MP4, PNG strip and GIF files from frames."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest

from unilab_lit.telemetry import video


def _frames(count: int) -> np.ndarray:
    frames = np.zeros((count, 48, 64, 3), dtype=np.uint8)
    for i in range(count):
        frames[i, :, i * 2 : i * 2 + 8] = 255  # a bar moving right
    return frames


def test_write_mp4_reads_back_with_its_frame_count_size_and_fps(tmp_path):
    path = tmp_path / "clip.mp4"
    video.write_mp4(path, _frames(12), fps=25)
    reader = imageio.get_reader(path)
    meta = reader.get_meta_data()
    frames = list(reader.iter_data())
    reader.close()
    assert len(frames) == 12
    assert meta["size"] == (64, 48) and meta["fps"] == 25
    assert not np.array_equal(frames[0], frames[-1])


def test_write_mp4_leaves_nothing_when_the_directory_is_missing(tmp_path):
    path = tmp_path / "missing" / "clip.mp4"
    with pytest.raises(OSError):
        video.write_mp4(path, _frames(3), fps=10)
    assert not path.exists()


def test_strip_puts_evenly_spaced_frames_side_by_side_first_and_last_included():
    frames = _frames(10)
    image = video.strip(frames, 4)
    assert image.shape == (48, 4 * 64, 3)
    assert np.array_equal(image[:, :64], frames[0]) and np.array_equal(image[:, -64:], frames[9])


def test_gif_bytes_is_an_animated_gif_of_every_frame():
    data = video.gif_bytes(_frames(5), fps=10)
    assert data[:6] == b"GIF89a"
    assert len(imageio.mimread(data, format="GIF")) == 5
