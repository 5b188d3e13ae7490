"""APPO: asynchronous PPO with V-trace targets and an IMPACT target policy, as a LightningModule."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities.types import OptimizerLRScheduler
from tensordict import TensorDict

from unilab_lit import distributed
from unilab_lit.algos.base import RLAlgorithm
from unilab_lit.algos.functional import (
    SURROGATE_RATIOS,
    SurrogateRatio,
    all_finite,
    clipped_surrogate_loss,
    clipped_value_loss,
    gaussian_kl,
    mean_terms,
    polyak_update,
    surrogate_reference,
)
from unilab_lit.algos.lr_schedule import LearningRateSchedule, Schedule
from unilab_lit.algos.vtrace import item_vtrace
from unilab_lit.nn.policies import Activation, GaussianActor, MLPCritic
from unilab_lit.nn.value_normalization import (
    VALUE_NORMALIZATIONS,
    ValueNormalization,
    ValueNormalizer,
)
from unilab_lit.telemetry import metrics
from unilab_lit.validation import check_arg

_UPDATES = "updates"
ROLLOUT_KEYS = (
    "obs",
    "critic_obs",
    "actions",
    "log_prob",
    "reward",
    "done",
    "truncated",
    "final_critic_obs",
    "last_critic_obs",
    "policy_version",
    "fresh",
)
"""Keys of one rollout item, a ``TensorDict`` of batch size ``[T, M]`` (see :class:`APPO`)."""

_INPUT_KEYS = ("obs", "critic_obs", "actions", "log_prob", "reward", "last_critic_obs")

# Hyperparameters of a directly built APPO hold its optimizer class: allow it to weights-only loads.
torch.serialization.add_safe_globals([torch.optim.Adam])


class APPO(RLAlgorithm):
    """Asynchronous PPO with V-trace off-policy correction and an IMPACT-style target policy.

    V-trace: Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
    Weighted Actor-Learner Architectures". Target policy and the ``π / max(π_b, π_target)``
    ratio: Luo et al. 2020, "IMPACT: Importance Weighted Asynchronous Architectures with
    Clipped Target Networks".

    One dataset item (a time-major ``TensorDict`` of batch size ``[T, M]``, :data:`ROLLOUT_KEYS`)
    is one learner iteration: V-trace targets and advantages, then ``num_learning_epochs ×
    num_mini_batches`` steps on the clipped surrogate (IMPACT's ratio by default), value loss and
    entropy bonus; the target actor follows the actor every ``target_update_freq`` iterations.
    docs/algorithms.md describes the item's keys, the update in order and the non-finite handling.

    Args:
        policy_obs_size: Width of the policy observation group (linked from the data module).
        critic_obs_size: Width of the critic observation group (linked from the data module).
        action_size: Width of the action vector (linked from the data module).
        actor_hidden_dims: Hidden-layer widths of the actor MLP.
        critic_hidden_dims: Hidden-layer widths of the critic MLP.
        activation: Hidden-layer activation of both MLPs.
        init_std: Initial action standard deviation (> 0).
        std_type: Parameterisation of the learned action std.
        gamma: Discount factor, in (0, 1].
        clip_rho_threshold: V-trace ρ̄, clip on importance weights in targets and advantages (> 0).
        clip_c_threshold: V-trace c̄, clip on the trace coefficients (> 0).
        vtrace_lambda: λ of λ-V-trace (rlax), in [0, 1]; 1 is the paper's V-trace.
        clip_param: PPO clip ε for the surrogate ratio and the value change, in (0, 1).
        surrogate_ratio: The ratio's denominator: ``"impact"`` ``max(π_b, π_target)``, ``"target"``
            or ``"behaviour"``; see :func:`~unilab_lit.algos.functional.surrogate_reference`.
        value_loss_coef: Weight of the value loss (>= 0).
        value_normalization: ``"none"``, ``"running"`` (Sample Factory's ``normalize_returns``) or
            ``"popart"`` (output-preserving); see :class:`~unilab_lit.nn.value_normalization.ValueNormalizer`.
            V-trace runs on de-normalised values, the value loss (clipped or not) in normalised units.
        use_clipped_value_loss: Clip the value change around the pre-update values.
        entropy_coef: Weight of the entropy bonus (>= 0).
        num_learning_epochs: Passes over each item per iteration (>= 1).
        num_mini_batches: Minibatches per pass (>= 1); the remainder of ``T·M`` is dropped.
        schedule: ``"adaptive"`` (KL-driven), ``"fixed"`` or ``"linear"`` (to ``min_learning_rate``
            at ``trainer.max_steps``): see :class:`~unilab_lit.algos.lr_schedule.LearningRateSchedule`.
        desired_kl: Target ``KL(target ‖ current)`` per minibatch for the adaptive schedule (> 0).
        kl_tolerance_factor: The rate falls when KL > desired·factor and rises when
            0 < KL < desired/factor (> 1).
        lr_factor: Multiplicative learning-rate change per adaptive step (> 1).
        min_learning_rate: Lower bound of the adaptive rate; final rate of the linear one (> 0).
        max_learning_rate: Upper bound of the adaptive learning rate (>= min_learning_rate); the
            optimizer's initial ``lr`` must lie within the bounds under the adaptive schedule.
        max_grad_norm: Global gradient-norm clip over actor and critic (> 0).
        target_update_freq: Iterations between target-actor updates (>= 1).
        tau: Target update ``target ← τ·actor + (1 − τ)·target``, in (0, 1]; 1 is a hard copy.
        max_nonfinite_steps: Consecutive skipped non-finite updates that stop training (>= 1).
        obs_clip: Bound of the normalised observations (> 0; Sample Factory 5, legged_gym 100) or
            ``None``; the normalisers carry it to the loss, collector, evaluation and export.
        optimizer: Optimizer of actor and critic together (``class_path`` in YAML); its ``lr``
            is the initial learning rate.
        compile_losses: ``torch.compile`` the minibatch loss at fit start (any device; see
            ``RLAlgorithm._compile``): faster steps after a compile of tens of seconds.

    Raises:
        ValueError: If an argument is outside its valid range (the message names it).
    """

    trains_from = "RolloutDataModule"

    def __init__(
        self,
        policy_obs_size: int,
        critic_obs_size: int,
        action_size: int,
        actor_hidden_dims: Sequence[int] = (512, 256, 128),
        critic_hidden_dims: Sequence[int] = (512, 256, 128),
        activation: Activation = "elu",
        init_std: float = 1.0,
        std_type: Literal["scalar", "log"] = "scalar",
        gamma: float = 0.99,
        clip_rho_threshold: float = 1.0,
        clip_c_threshold: float = 1.0,
        vtrace_lambda: float = 1.0,
        clip_param: float = 0.2,
        surrogate_ratio: SurrogateRatio = "impact",
        value_loss_coef: float = 1.0,
        value_normalization: ValueNormalization = "none",
        use_clipped_value_loss: bool = True,
        entropy_coef: float = 0.01,
        num_learning_epochs: int = 5,
        num_mini_batches: int = 4,
        schedule: Schedule = "adaptive",
        desired_kl: float = 0.01,
        kl_tolerance_factor: float = 1.2,
        lr_factor: float = 1.1,
        min_learning_rate: float = 1e-5,
        max_learning_rate: float = 1e-2,
        max_grad_norm: float = 1.0,
        target_update_freq: int = 1,
        tau: float = 1.0,
        max_nonfinite_steps: int = 10,
        obs_clip: float | None = 10.0,
        optimizer: OptimizerCallable = torch.optim.Adam,
        compile_losses: bool = False,
    ) -> None:
        super().__init__(
            policy_obs_size,
            critic_obs_size,
            action_size,
            max_nonfinite_steps,
            "Check the environment's rewards and observations for NaN/inf, or lower the "
            "optimizer's lr / max_learning_rate.",
            obs_clip,
        )
        for name, dims in (
            ("actor_hidden_dims", actor_hidden_dims),
            ("critic_hidden_dims", critic_hidden_dims),
        ):
            valid = len(dims) > 0 and all(d >= 1 for d in dims)
            check_arg(valid, name, list(dims), "a non-empty list of positive widths")
        check_arg(0.0 < gamma <= 1.0, "gamma", gamma, "in (0, 1]")
        check_arg(clip_rho_threshold > 0.0, "clip_rho_threshold", clip_rho_threshold, "> 0")
        check_arg(clip_c_threshold > 0.0, "clip_c_threshold", clip_c_threshold, "> 0")
        check_arg(0.0 <= vtrace_lambda <= 1.0, "vtrace_lambda", vtrace_lambda, "in [0, 1]")
        check_arg(0.0 < clip_param < 1.0, "clip_param", clip_param, "in (0, 1)")
        ratios = list(SURROGATE_RATIOS)
        check_arg(surrogate_ratio in ratios, "surrogate_ratio", surrogate_ratio, f"one of {ratios}")
        check_arg(value_loss_coef >= 0.0, "value_loss_coef", value_loss_coef, ">= 0")
        check_arg(entropy_coef >= 0.0, "entropy_coef", entropy_coef, ">= 0")
        check_arg(num_learning_epochs >= 1, "num_learning_epochs", num_learning_epochs, ">= 1")
        check_arg(num_mini_batches >= 1, "num_mini_batches", num_mini_batches, ">= 1")
        check_arg(
            value_normalization in VALUE_NORMALIZATIONS,
            "value_normalization",
            value_normalization,
            f"one of {list(VALUE_NORMALIZATIONS)}",
        )
        self._lr_schedule = LearningRateSchedule(
            schedule,
            desired_kl,
            kl_tolerance_factor,
            lr_factor,
            min_learning_rate,
            max_learning_rate,
        )
        check_arg(max_grad_norm > 0.0, "max_grad_norm", max_grad_norm, "> 0")
        check_arg(target_update_freq >= 1, "target_update_freq", target_update_freq, ">= 1")
        check_arg(0.0 < tau <= 1.0, "tau", tau, "in (0, 1]")
        self.save_hyperparameters()
        self._optimizer_callable = optimizer

        self._build_actor(
            GaussianActor,
            hidden_dims=list(actor_hidden_dims),
            activation=activation,
            init_std=init_std,
            std_type=std_type,
        )
        self.critic = MLPCritic(critic_obs_size, list(critic_hidden_dims), activation)
        self.value_normalizer = ValueNormalizer(value_normalization)
        self.target_actor = self._actor_spec.build()
        self.target_actor.load_state_dict(self.actor.state_dict())
        self.target_actor.requires_grad_(False)
        self._minibatch_loss_fn = self._minibatch_loss

    # ------------------------------------------------------------------------- Lightning
    def configure_optimizers(self) -> OptimizerLRScheduler:
        optimizer = self._optimizer_callable([*self.actor.parameters(), *self.critic.parameters()])
        scheduler = self._lr_schedule.scheduler(optimizer, self.trainer.max_steps)
        # Manual optimization: training_step steps the scheduler once per iteration itself.
        return optimizer if scheduler is None else ([optimizer], [scheduler])

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.hparams.compile_losses:
            self._minibatch_loss_fn = self._compile(self._minibatch_loss)

    def training_step(self, dataloader_iter: Iterator[Any]) -> None:
        batch, _, _ = next(dataloader_iter)
        # No-op for the staging pool's items, which already live on the learner's device.
        batch = batch.to(self.device, non_blocking=True)
        iteration = self.global_step
        num_samples = batch.numel()
        policy_lag = (iteration - batch["policy_version"]).float().mean()
        logged: dict[str, torch.Tensor | float] = {}
        # Under DDP a non-finite batch on one rank skips the iteration on every rank.
        if distributed.all_ranks(all_finite(batch, _INPUT_KEYS)):
            # Only columns that arrived since the previous item: a rollout stays in the staging
            # pool for several iterations and would otherwise be counted several times. Under
            # DDP a rank without fresh columns still takes part in the normaliser's collective.
            fresh = batch["fresh"]
            if bool(fresh.any()) or distributed.is_distributed():
                self._update_normalizers(batch["obs"][fresh], batch["critic_obs"][fresh])
            data, trace_terms = self._prepare(batch)
            logged.update(trace_terms)
            logged.update(self._optimize(data, fresh, iteration))
        else:
            self._skip_nonfinite(_UPDATES, f"iteration {iteration}: input batch")
            self._count_iteration()
        if (iteration + 1) % self.hparams.target_update_freq == 0:
            polyak_update(self.target_actor, self.actor, self.hparams.tau)
        if self._loggers_write():
            logged[metrics.LEARNING_RATE] = self.optimizers().optimizer.param_groups[0]["lr"]
            logged[metrics.ACTION_STD] = self.actor.std().detach().mean()
            self._log_terms(logged, num_samples)
        # In the progress bar, next to the reward and env-steps/s EpisodeStatsMonitor shows.
        lag = {"sync_dist": True, "reduce_fx": "max", "on_step": True, "on_epoch": False}
        self.log(metrics.POLICY_LAG, policy_lag, prog_bar=True, batch_size=num_samples, **lag)
        if self.hparams.schedule == "linear":
            self.lr_schedulers().step()

    # ------------------------------------------------------------------------ iteration
    @torch.no_grad()
    def _prepare(self, batch: TensorDict) -> tuple[TensorDict, dict[str, torch.Tensor]]:
        """Per-sample training inputs (a ``TensorDict`` of ``[T, M]``) and the trace diagnostics
        (ρ clip fraction, trace-cut fraction, mean trace coefficient).

        The inputs are the normalised observations, pre-update values (the critic's outputs),
        target-policy terms, V-trace targets (values) and advantages.
        """
        hp = self.hparams
        obs = self.obs_normalizer(batch["obs"])
        critic_obs = self.critic_obs_normalizer(batch["critic_obs"])
        actions = batch["actions"]
        truncated = batch["truncated"]
        outputs = self.critic(critic_obs)
        values = self.value_normalizer.denormalize(outputs)
        last_critic_obs = self.critic_obs_normalizer(batch["last_critic_obs"][-1])
        bootstrap = self.value_normalizer.denormalize(self.critic(last_critic_obs))
        final_values = torch.zeros_like(values)
        if bool(truncated.any()):
            final_obs = self.critic_obs_normalizer(batch["final_critic_obs"][truncated])
            final_values[truncated] = self.value_normalizer.denormalize(self.critic(final_obs))
        target = self.target_actor.distribution(obs)
        target_log_prob = target.log_prob(actions).sum(-1)
        returns, trace_terms = item_vtrace(
            batch,
            target_log_prob,
            values,
            bootstrap,
            final_values,
            gamma=hp.gamma,
            clip_rho_threshold=hp.clip_rho_threshold,
            clip_c_threshold=hp.clip_c_threshold,
            lambda_=hp.vtrace_lambda,
        )
        advantages = returns.pg_advantages
        mean, std = distributed.mean_std_over_ranks(advantages)
        advantages = (advantages - mean) / (std + 1e-8)
        data = TensorDict(
            {
                "obs": obs,
                "critic_obs": critic_obs,
                "actions": actions,
                "behaviour_log_prob": batch["log_prob"],
                "target_log_prob": target_log_prob,
                "target_mean": target.mean,
                "target_std": target.stddev,
                "values": outputs,
                "returns": returns.vs,
                "advantages": advantages,
            },
            batch_size=batch.batch_size,
            device=batch.device,
        )
        return data, trace_terms

    def _optimize(
        self, data: TensorDict, fresh: torch.Tensor, iteration: int
    ) -> dict[str, torch.Tensor]:
        hp = self.hparams
        num_samples = data.numel()
        finite = bool(data["advantages"].isfinite().all() & data["returns"].isfinite().all())
        if not distributed.all_ranks(finite):
            self._skip_nonfinite(_UPDATES, f"iteration {iteration}: V-trace targets")
            self._count_iteration()
            return {}
        self._normalize_values(data, fresh)
        samples = data.reshape(-1)
        mini_batch_size = num_samples // hp.num_mini_batches
        if mini_batch_size < 1:
            raise ValueError(
                f"num_mini_batches ({hp.num_mini_batches}) exceeds the {num_samples} samples "
                "in this batch (T x M); lower num_mini_batches or collect more per iteration"
            )
        optimizer = self.optimizers()
        params = [p for group in optimizer.optimizer.param_groups for p in group["params"]]
        total_steps = hp.num_learning_epochs * hp.num_mini_batches
        steps: list[dict[str, torch.Tensor]] = []
        for epoch in range(hp.num_learning_epochs):
            order = torch.randperm(num_samples, device=samples.device)
            for k in range(hp.num_mini_batches):
                idx = order[k * mini_batch_size : (k + 1) * mini_batch_size]
                loss, terms = self._minibatch_loss_fn(samples[idx])
                self._lr_schedule.adapt(optimizer.optimizer, loss, terms[metrics.APPROX_KL])
                grad_norm = self._step(
                    optimizer,
                    loss,
                    params,
                    max_grad_norm=hp.max_grad_norm,
                    counted=epoch * hp.num_mini_batches + k + 1 == total_steps,
                    kind=_UPDATES,
                    where=f"iteration {iteration}: loss or gradient",
                )
                if grad_norm is not None:
                    steps.append({**terms, metrics.GRAD_NORM: grad_norm})
        return mean_terms(steps)

    @torch.no_grad()
    def _normalize_values(self, data: TensorDict, fresh: torch.Tensor) -> None:
        """Fresh columns' targets into the value statistics; values and targets into critic units."""
        targets = data["returns"]
        fresh_targets = targets[fresh]
        output_layer = self.critic.model.mlp[-1]
        data["values"] = self.value_normalizer.update(fresh_targets, output_layer, data["values"])
        data["returns"] = self.value_normalizer.normalize(targets)

    def _minibatch_loss(self, mb: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        hp = self.hparams
        dist = self.actor.distribution(mb["obs"])
        log_prob = dist.log_prob(mb["actions"]).sum(-1)
        entropy = dist.entropy().sum(-1).mean()
        reference = surrogate_reference(
            hp.surrogate_ratio, mb["behaviour_log_prob"], mb["target_log_prob"]
        )
        surrogate, clip_fraction = clipped_surrogate_loss(
            log_prob, reference, mb["advantages"], hp.clip_param
        )
        value_loss = clipped_value_loss(
            self.critic(mb["critic_obs"]),
            mb["values"],
            mb["returns"],
            hp.clip_param,
            hp.use_clipped_value_loss,
        )
        with torch.no_grad():
            kl = gaussian_kl(mb["target_mean"], mb["target_std"], dist.mean, dist.stddev).mean()
        loss = surrogate + hp.value_loss_coef * value_loss - hp.entropy_coef * entropy
        terms = {
            metrics.LOSS_SURROGATE: surrogate,
            metrics.LOSS_VALUE: value_loss,
            metrics.LOSS_ENTROPY: entropy,
            metrics.APPROX_KL: kl,
            metrics.CLIP_FRACTION: clip_fraction,
        }
        return loss, terms
