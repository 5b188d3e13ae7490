"""Env-steps/s of our batched ``step`` next to raw ``mujoco.batch.Batch.step`` on the same model.

For each task and batch size, both sides run the same model with the same substeps
(``frame_skip``) and threads, alternating in short rounds so that load on a shared machine hits
both alike. Ours: ``env.step`` with random actions in the action bounds (observation, reward,
termination, auto-reset, episode accounting included). Raw: ``Batch.step(nstep=frame_skip)``
alone, on the states ours stepped: each round of ours records the integration state, controls
included, before each physics step (the copies left out of ours' timing), and the next round of
raw writes them back one by one, untimed, before each timed step. The ratio ours / raw is the
fraction of raw physics throughput the env keeps. The last column, raw free, is the old
baseline: raw from ours' initial states with the controls the task's action map makes of random
actions and no resets (robots that fall stay down), so raw / raw free shows what the simulated
states cost.

    python bench/env_throughput.py
    python bench/env_throughput.py --tasks HalfCheetah --num-envs 1024 --seconds 2
    python bench/env_throughput.py --smoke    # one small task, 4 envs, 0.3 s a side (CI)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from mujoco import batch as mj_batch
from smoke import parse_args

from unilab_lit.envs import make_env, registered_tasks
from unilab_lit.envs.base import BatchedMujocoEnv

ROUNDS = 3
POOL = 16  # distinct random action arrays cycled through, so sampling stays out of the timing


def _steps_per_second(step: Callable[[int], float], seconds: float) -> tuple[int, float]:
    """Run ``step(i)``, which returns its timed seconds, until they sum to about ``seconds``;
    return (steps, timed seconds)."""
    steps = 0
    elapsed = 0.0
    while elapsed < seconds:
        elapsed += step(steps)
        steps += 1
    return steps, elapsed


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


class _StateRecorder:
    """Copies the integration state, controls included, of every simulation just before each
    physics step of ``env`` into ``states``, and sums the copying time in ``seconds`` so that
    ours' timing can leave it out."""

    def __init__(self, env: BatchedMujocoEnv) -> None:
        self.states: list[np.ndarray] = []
        self.seconds = 0.0
        simulate = env._simulate

        def recording_simulate() -> None:
            start = time.perf_counter()
            self.states.append(env.batch.state.copy())
            self.seconds += time.perf_counter() - start
            simulate()

        env._simulate = recording_simulate


def _raw_controls(env: BatchedMujocoEnv, rng: np.random.Generator) -> list[np.ndarray]:
    """Controls drawn as the env makes them from uniform actions: ``offset + scale * action``
    (the task's action map, e.g. joint targets around a standing pose for the robots), so that
    both sides simulate the same kind of motion."""
    meta = env.deployment_metadata()
    offset = np.asarray(meta["action_offset"])
    scale = np.asarray(meta["action_scale"])
    low, high = env.spec.action_low, env.spec.action_high
    shape = (env.num_envs, env.spec.action_size)
    return [offset + scale * rng.uniform(low, high, size=shape) for _ in range(POOL)]


def bench_one(task: str, num_envs: int, threads: int, seconds: float, seed: int) -> dict:
    env = make_env(task, num_envs, seed=seed, num_threads=threads)
    env.reset()
    rng = np.random.default_rng(seed)
    low, high = env.spec.action_low, env.spec.action_high
    actions = [
        rng.uniform(low, high, size=(num_envs, env.spec.action_size)).astype(np.float32)
        for _ in range(POOL)
    ]
    free = mj_batch.Batch(env.model, nsim=num_envs, nthread=threads)
    free.state[:] = env.batch.state
    free_ctrl = free.bind("ctrl")
    controls = _raw_controls(env, rng)
    recorder = _StateRecorder(env)
    raw = mj_batch.Batch(env.model, nsim=num_envs, nthread=threads)

    def ours_step(i: int) -> float:
        copying = recorder.seconds
        elapsed = _timed(lambda: env.step(actions[i % POOL]))
        return elapsed - (recorder.seconds - copying)

    def raw_step(i: int) -> float:
        raw.state[:] = recorder.states[i % len(recorder.states)]
        return _timed(lambda: raw.step(nstep=env.frame_skip))

    def free_step(i: int) -> float:
        free_ctrl[:] = controls[i % POOL]
        return _timed(lambda: free.step(nstep=env.frame_skip))

    sides = (("ours", ours_step), ("raw", raw_step), ("free", free_step))
    for _, step in sides:
        step(0)
    totals = {name: [0, 0.0] for name, _ in sides}
    for _ in range(ROUNDS):
        for name, step in sides:
            if name == "ours":
                recorder.states.clear()
            steps, elapsed = _steps_per_second(step, seconds / ROUNDS)
            totals[name][0] += steps
            totals[name][1] += elapsed
    env.close()
    ours, raw_rate, free_rate = (totals[name][0] * num_envs / totals[name][1] for name, _ in sides)
    return {
        "task": task,
        "num_envs": num_envs,
        "threads": threads,
        "frame_skip": env.frame_skip,
        "ours": ours,
        "raw": raw_rate,
        "ratio": ours / raw_rate,
        "free": free_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=registered_tasks(), help="task names")
    parser.add_argument("--num-envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--threads", type=int, default=1, help="physics threads of both sides")
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="seconds per side per measurement"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, tasks=["CartpoleSwingup"], num_envs=[4], seconds=0.3)
    unknown = sorted(set(args.tasks) - set(registered_tasks()))
    if unknown:
        parser.error(f"unknown tasks {unknown}; registered: {registered_tasks()}")

    header = (
        f"{'task':<18} {'envs':>5} {'thr':>3} {'fs':>3} "
        f"{'ours env-steps/s':>17} {'raw env-steps/s':>16} {'ratio':>6} {'raw free':>9}"
    )
    print(header)
    print("-" * len(header))
    for task in args.tasks:
        for num_envs in args.num_envs:
            row = bench_one(task, num_envs, args.threads, args.seconds, args.seed)
            print(
                f"{row['task']:<18} {row['num_envs']:>5} {row['threads']:>3} "
                f"{row['frame_skip']:>3} {row['ours']:>17,.0f} {row['raw']:>16,.0f} "
                f"{row['ratio']:>6.2f} {row['free']:>9,.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
