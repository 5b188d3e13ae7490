"""The standing-still baseline of a joystick task: tracking errors of a policy that never moves.

Actions are joint-target offsets from the standing pose (``home + action_scale * action``), so
the zero action holds the default pose. This runs whole episodes of that policy through the
same episode statistics a training run logs (``Episode/tracking_error_*``) and an evaluation
logs (``Eval/tracking_error_*``), under the task's default command distribution (the one the
shipped quadruped configs train on), and prints the means. A trained policy's tracking error is
judged against these figures: standing still scores about the mean commanded speed.

    python bench/quadruped_baseline.py
    python bench/quadruped_baseline.py --episodes 256 --seed 1
    python bench/quadruped_baseline.py --smoke                # 4 envs, 4 episodes (CI)
    python bench/quadruped_baseline.py --task Go1Joystick     # or G1Walk (a G1 standing still
                                                              # may fall: lengths are printed)

Commands and reset states come from the env's generator, which actions never touch, so any
policy that does not fall meets the same commands: ``--num-envs 16 --episodes 16 --seed 1000003``
replays the very episodes of the ``PolicyEvaluator`` in ``configs/appo_quadruped_2core.yaml``
(its defaults), which makes ``Eval/tracking_error_*`` a paired comparison with these figures.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from smoke import parse_args

from unilab_lit.envs import make_env
from unilab_lit.envs.policy_episodes import run_episodes
from unilab_lit.telemetry import metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64, help="envs stepped together")
    parser.add_argument("--episodes", type=int, default=128, help="whole episodes to average")
    parser.add_argument("--seed", type=int, default=0, help="seed of resets and commands")
    parser.add_argument("--task", default="QuadrupedJoystick", help="a joystick task's name")
    args = parse_args(parser, num_envs=4, episodes=4)
    env = make_env(args.task, args.num_envs, seed=args.seed)
    action_size = env.spec.action_size
    results = run_episodes(
        env, lambda obs: torch.zeros(obs.shape[0], action_size), args.episodes, seed=args.seed
    )
    env.close()
    print(f"{args.task}, zero action (standing still), {len(results.returns)} whole episodes:")
    print(f"  mean episode length  {results.mean_length:8.1f}")
    print(f"  mean return          {results.mean_return:8.2f}")
    for term in ("tracking_lin_vel", "tracking_ang_vel"):
        sums = results.terms[term]
        print(f"  {metrics.episode_reward_term(term):34s} {np.mean(sums):8.2f} per episode")
    for name, means in results.metrics.items():
        low, high = np.percentile(means, [10, 90])
        print(
            f"  {metrics.episode_metric(name):34s} {np.mean(means):8.3f} "
            f"(10th-90th percentile of episodes {low:.3f}-{high:.3f})"
        )


if __name__ == "__main__":
    main()
