"""Unitree robots on their real models: ``Go1Joystick`` and ``G1Walk``.

The MJCF models are fetched on first use into a user cache (see
:mod:`unilab_lit.envs.robots.assets`); ``python -m unilab_lit.envs.robots fetch`` fetches
them ahead of time, and a task's ``model_dir`` points at a local copy of MuJoCo Menagerie's
robot folder instead.
"""
