"""MP4 and GIF clips streamed frame by frame, the bounded strip sample, and the PNG strip."""

from __future__ import annotations

import weakref

import imageio.v2 as imageio
import imageio.v3 as iio
import numpy as np
import pytest

from unilab_lit.telemetry import video


def _frame(i: int) -> np.ndarray:
    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    frame[:, i * 2 : i * 2 + 8] = 255  # a bar moving right
    return frame


def _frames(count: int) -> np.ndarray:
    return np.stack([_frame(i) for i in range(count)])


def _read_mp4(path):
    reader = imageio.get_reader(path)
    meta = reader.get_meta_data()
    frames = list(reader.iter_data())
    reader.close()
    return meta, frames


def test_write_clip_mp4_reads_back_with_its_frame_count_size_and_fps(tmp_path):
    path = tmp_path / "clip.mp4"
    assert video.write_clip(path, _frames(12), fps=25) == 12
    meta, frames = _read_mp4(path)
    assert len(frames) == 12
    assert meta["size"] == (64, 48) and meta["fps"] == 25
    assert not np.array_equal(frames[0], frames[-1])


def test_write_clip_gif_is_a_looping_gif_of_every_frame_at_its_rate(tmp_path):
    path = tmp_path / "clip.gif"
    assert video.write_clip(path, _frames(7), fps=12.5) == 7
    assert path.read_bytes()[:6] == b"GIF89a"
    frames = iio.imread(path, index=None)
    assert frames.shape == (7, 48, 64, 3)
    meta = iio.immeta(path)
    assert meta["duration"] == 80 and meta["loop"] == 0


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_streamed_clip_holds_no_frame_it_was_given_before(suffix, tmp_path):
    """Frames are pulled from the generator one at a time and at most the last two stay alive
    (the writer's loop variable and the encoder's last input), however long the clip.

    No ``gc.collect()``: reference counting frees a frame the moment nothing holds it, and a
    frame kept alive by a cycle counts as held, which is what the bound is about (a collection
    per frame took ~0.5 s in a full suite's heap).
    """
    alive: list[weakref.ref] = []
    pulled: list[int] = []
    count = 60

    def frames():
        for i in range(count):
            assert sum(ref() is not None for ref in alive) <= 2
            pulled.append(i)
            frame = _frame(i)
            alive.append(weakref.ref(frame))
            yield frame
            del frame

    clip = video.write_clip(tmp_path / f"clip{suffix}", frames(), fps=10)
    assert clip == count and pulled == list(range(count))


def test_clip_writer_encodes_each_frame_as_it_is_appended(tmp_path):
    path = tmp_path / "clip.mp4"
    with video.ClipWriter(path, fps=10) as writer:
        for i in range(5):
            writer.append(_frame(i))
            assert writer.frames_written == i + 1
    assert len(_read_mp4(path)[1]) == 5


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_failure_mid_clip_removes_the_half_written_file(suffix, tmp_path):
    path = tmp_path / f"clip{suffix}"

    def frames():
        yield from _frames(3)
        raise RuntimeError("renderer died")

    with pytest.raises(RuntimeError, match="renderer died"):
        video.write_clip(path, frames(), fps=10)
    assert list(tmp_path.iterdir()) == []


def test_a_frame_of_another_size_fails_and_removes_the_file(tmp_path):
    path = tmp_path / "clip.mp4"
    with pytest.raises(ValueError, match="32x24"):
        video.write_clip(path, [_frame(0), np.zeros((24, 32, 3), np.uint8)], fps=10)
    assert not path.exists()


def test_write_clip_leaves_nothing_when_the_directory_is_missing(tmp_path):
    path = tmp_path / "missing" / "clip.mp4"
    with pytest.raises(OSError):
        video.write_clip(path, _frames(3), fps=10)
    assert not path.exists()


def test_write_clip_refuses_no_frames_a_bad_rate_and_an_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="no frames"):
        video.write_clip(tmp_path / "clip.mp4", [], fps=10)
    with pytest.raises(ValueError, match="fps"):
        video.write_clip(tmp_path / "clip.mp4", _frames(2), fps=0)
    with pytest.raises(ValueError, match="neither .mp4 nor .gif"):
        video.write_clip(tmp_path / "clip.avi", _frames(2), fps=10)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("length", [1, 4, 11, 500])
def test_strip_frames_keeps_a_bounded_spread_with_the_first_and_last_frame(length):
    sample = video.StripFrames(count=4)
    for i in range(length):
        sample.append(np.array([[[i // 256, i % 256, 0]]], dtype=np.uint8))  # i, in two bytes
        assert len(sample.frames) <= 2 * 4 + 1
    kept = [256 * int(frame[0, 0, 0]) + int(frame[0, 0, 1]) for frame in sample.frames]
    assert kept[0] == 0 and kept[-1] == length - 1 and kept == sorted(set(kept))
    assert len(kept) >= min(4, length)
    # Evenly spaced, the latest frame aside.
    gaps = np.diff(kept[:-1])
    assert len(gaps) == 0 or gaps.max() == gaps.min()


def test_strip_puts_evenly_spaced_frames_side_by_side_first_and_last_included():
    frames = _frames(10)
    image = video.strip(frames, 4)
    assert image.shape == (48, 4 * 64, 3)
    assert np.array_equal(image[:, :64], frames[0]) and np.array_equal(image[:, -64:], frames[9])


def test_gif_bytes_is_an_animated_gif_of_every_frame():
    data = video.gif_bytes(_frames(5), fps=10)
    assert data[:6] == b"GIF89a"
    assert len(imageio.mimread(data, format="GIF")) == 5
