"""The headless GL backend is chosen before MuJoCo is imported."""

from __future__ import annotations

import os

import pytest

from unilab_lit import gl_backend


@pytest.fixture
def no_mujoco_gl(monkeypatch):
    # Empty counts as unset; monkeypatch restores the real value after the test.
    monkeypatch.setenv("MUJOCO_GL", "")


def test_choose_headless_backend_prefers_egl_when_its_library_loads(no_mujoco_gl, monkeypatch):
    monkeypatch.setattr(gl_backend, "_loads", lambda library: True)
    assert gl_backend.choose_headless_backend() == "egl"
    assert os.environ["MUJOCO_GL"] == "egl"


def test_choose_headless_backend_falls_back_to_osmesa_without_egl(no_mujoco_gl, monkeypatch):
    monkeypatch.setattr(gl_backend, "_loads", lambda library: "OSMesa" in library)
    assert gl_backend.choose_headless_backend() == "osmesa"


def test_choose_headless_backend_keeps_a_backend_the_user_set(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    assert gl_backend.choose_headless_backend() == "glfw"


def test_choose_headless_backend_leaves_it_unset_without_any_library(no_mujoco_gl, monkeypatch):
    monkeypatch.setattr(gl_backend, "_loads", lambda library: False)
    assert gl_backend.choose_headless_backend() is None
