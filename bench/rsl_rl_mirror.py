"""How ``bench/appo_vs_rsl_rl.py`` mirrors one of our APPO configs in rsl-rl-lib's ``PPO``.

The bench's rsl_rl side trains with the config's sizes and coefficients (:func:`rsl_rl_train_cfg`);
an APPO option rsl_rl has no counterpart for makes the bench refuse the config in one line
(:func:`unmirrored_option`) rather than compare unlike runs.
"""

from __future__ import annotations

# APPO options and the values rsl_rl's PPO mirrors (the first is APPO's default). rsl_rl has no
# value normalisation, no linear schedule and no observation clip; a clip at the default 10
# standard deviations is as good as none.
MIRRORED = {
    "value_normalization": ("none",),
    "schedule": ("adaptive", "fixed"),
    "obs_clip": (10.0, None),
}


def unmirrored_option(config: str) -> str | None:
    """The first APPO option of ``config`` that rsl_rl cannot mirror, as one line; else None."""
    import yaml

    with open(config) as f:
        init_args = (yaml.safe_load(f).get("model") or {}).get("init_args") or {}
    for key, mirrored in MIRRORED.items():
        value = init_args.get(key, mirrored[0])
        if value not in mirrored:
            return (
                f"{config}: model.init_args.{key}={value!r} has no rsl_rl counterpart; "
                f"it mirrors {list(mirrored)}"
            )
    return None


def rsl_rl_train_cfg(model_hparams, num_steps: int, staging_capacity: int) -> dict:
    """rsl_rl's runner config with our APPO's sizes and coefficients.

    rsl_rl trains on each sample for ``num_learning_epochs`` passes; ours trains on each rollout in
    ``staging_capacity`` consecutive iterations of ``num_learning_epochs`` passes each, so rsl_rl
    gets their product: both sides take the same gradient passes per collected sample. That
    holds exactly under ``max_policy_lag`` (or ``synchronous``); a free-running collector that
    outpaces the learner pushes rollouts out of the pool early (the bench prints how often).
    """
    hp = model_hparams
    distribution = {
        "class_name": "GaussianDistribution",
        "init_std": hp.init_std,
        "std_type": hp.std_type,
    }
    return {
        "num_steps_per_env": num_steps,
        "save_interval": 10**9,  # only the first and the final model, like ModelCheckpoint(last)
        "obs_groups": {"actor": ["policy"], "critic": ["critic"]},
        "logger": "tensorboard",
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": hp.num_learning_epochs * staging_capacity,
            "num_mini_batches": hp.num_mini_batches,
            "clip_param": hp.clip_param,
            "gamma": hp.gamma,
            "value_loss_coef": hp.value_loss_coef,
            "use_clipped_value_loss": hp.use_clipped_value_loss,
            "entropy_coef": hp.entropy_coef,
            "learning_rate": hp.optimizer["init_args"]["lr"],
            "max_grad_norm": hp.max_grad_norm,
            "schedule": hp.schedule,
            "desired_kl": hp.desired_kl,
        },
        "actor": {
            "class_name": "MLPModel",
            "hidden_dims": list(hp.actor_hidden_dims),
            "activation": hp.activation,
            "obs_normalization": True,
            "distribution_cfg": distribution,
        },
        "critic": {
            "class_name": "MLPModel",
            "hidden_dims": list(hp.critic_hidden_dims),
            "activation": hp.activation,
            "obs_normalization": True,
        },
    }
