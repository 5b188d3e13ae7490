"""Unit tests of the learner → collector callbacks: hooks called directly on small fakes."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from unilab_lit.callbacks import EpisodeStatsMonitor, ObsNormSync, RLCheckpoint, WeightSync
from unilab_lit.collector.link import CollectorInbox, CollectorLink, FeedStats
from unilab_lit.collector.options import CollectorOptions
from unilab_lit.data.rollout import RolloutDataModule
from unilab_lit.ipc import NOT_PUBLISHED, SharedObsStats, SharedWeights, flat_size
from unilab_lit.ipc.channel import EPISODES, TIMING
from unilab_lit.nn.normalization import ObsNormalizer
from unilab_lit.telemetry import metrics as keys


class _Module:
    """The parts of an algorithm module the callbacks touch."""

    def __init__(self) -> None:
        self.policy = nn.Linear(3, 2)
        self.obs_normalizer = ObsNormalizer(3)
        self.logged: dict[str, float] = {}
        self.prog_bar: dict[str, float] = {}

    def collector_policy(self) -> nn.Module:
        return self.policy

    def log_dict(self, values, prog_bar=False, batch_size=None) -> None:
        self.logged.update(values)
        if prog_bar:
            self.prog_bar.update(values)


class _Channel:
    """The collector's metrics channel as the inbox reads it: queued messages and a drop count."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.dropped = 0

    def drain(self) -> list[dict]:
        drained, self.messages = self.messages, []
        return drained


@pytest.fixture
def rig():
    """A trainer whose data module hands out a real ``CollectorLink`` over real shared blocks
    and a real inbox, without a collector process; yields (trainer, module, link, channel)."""
    module = _Module()
    channel = _Channel()
    link = CollectorLink(
        options=CollectorOptions("CartpoleSwingup", 2),
        weights=SharedWeights(flat_size(module.policy)),
        obs_stats=SharedObsStats(3),
        inbox=CollectorInbox(channel, SimpleNamespace(), alive=lambda: True),
        transport=SimpleNamespace(dropped=0, replay=None),
        feed=FeedStats(),
    )
    trainer = SimpleNamespace(
        global_step=0,
        datamodule=SimpleNamespace(collector_link=link),
        log_every_n_steps=1,
        should_stop=False,
        num_training_batches=float("inf"),  # one endless epoch, as without limit_train_batches
    )
    yield trainer, module, link, channel
    link.weights.unlink()
    link.obs_stats.unlink()


def test_weight_sync_publishes_on_train_start_then_every_n_steps(rig):
    trainer, module, link, channel = rig
    sync = WeightSync(every_n_steps=2)
    sync.on_train_start(trainer, module)
    assert link.weights.version == 0
    reader = nn.Linear(3, 2)
    assert link.weights.load_module_if_newer(reader, NOT_PUBLISHED) == 0
    assert torch.equal(reader.weight, module.policy.weight)
    for step in (1, 2, 3, 4):
        trainer.global_step = step
        sync.on_train_batch_end(trainer, module, None, None, step - 1)
    assert link.weights.version == 4


def test_weight_sync_skips_an_iteration_that_did_not_advance_the_step(rig):
    trainer, module, link, channel = rig
    sync = WeightSync()
    sync.on_train_start(trainer, module)
    sync.on_train_batch_end(trainer, module, None, None, 0)  # every update skipped: step still 0
    assert link.weights.version == 0  # no duplicate version, no error


def test_obs_norm_sync_publishes_the_normalizer_statistics(rig):
    trainer, module, link, channel = rig
    module.obs_normalizer.update(torch.arange(12.0).reshape(4, 3))
    trainer.global_step = 5
    ObsNormSync().on_train_start(trainer, module)
    snapshot = link.obs_stats.read_if_newer(NOT_PUBLISHED)
    assert snapshot.version == 5 and snapshot.count == 4
    assert torch.allclose(snapshot.mean.float(), module.obs_normalizer.mean)


def test_publishers_reject_a_schedule_below_one():
    with pytest.raises(ValueError, match="WeightSync.every_n_steps must be >= 1, got 0"):
        WeightSync(every_n_steps=0)


def _episodes(returns, lengths, upright):
    return {
        "kind": EPISODES,
        "return": np.asarray(returns, np.float32),
        "length": np.asarray(lengths, np.float32),
        "reward/upright": np.asarray(upright, np.float32),
        "nonfinite_resets": 1,
    }


def test_episode_stats_monitor_logs_window_means_and_throughput(rig):
    trainer, module, link, channel = rig
    monitor = EpisodeStatsMonitor(window=3)
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    link.feed.env_steps, link.feed.learned_env_steps = 1000, 600
    channel.messages += [
        _episodes([1.0, 2.0], [10, 20], [0.5, 0.5]),
        _episodes([3.0, 4.0], [30, 40], [1.0, 1.0]),
        {"kind": TIMING, "env_steps_per_s": 1234.0},
    ]
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    logged = module.logged
    assert logged[keys.MEAN_REWARD] == pytest.approx(3.0)  # last 3 episodes: 2, 3, 4
    assert logged[keys.MEAN_EPISODE_LENGTH] == pytest.approx(30.0)
    assert logged[keys.episode_reward_term("upright")] == pytest.approx(2.5 / 3)
    assert logged[keys.COLLECTION_FPS] == 1234.0
    assert logged[keys.ENV_STEPS] == 1000.0
    assert logged[keys.LEARNED_ENV_STEPS] == 600.0
    assert logged[keys.NONFINITE_RESETS] == 2.0
    assert logged[keys.TOTAL_FPS] > 0 and logged[keys.LEARN_FPS] > 0
    assert keys.MEAN_REWARD in module.prog_bar


def test_episode_stats_monitor_logs_task_metrics_as_window_means_beside_reward_terms(rig):
    trainer, module, link, channel = rig
    monitor = EpisodeStatsMonitor(window=3)
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    first, second = _episodes([1.0, 2.0], [10, 20], [0.5, 0.5]), _episodes([3.0], [30], [1.0])
    first["metric/tracking_error_lin_vel"] = np.asarray([0.9, 0.6], np.float32)
    second["metric/tracking_error_lin_vel"] = np.asarray([0.3], np.float32)
    channel.messages += [first, second]
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    logged = module.logged
    # The key a user looks for in TensorBoard (metrics.EPISODE_METRIC).
    assert logged["Episode/tracking_error_lin_vel"] == pytest.approx(0.6)
    assert logged[keys.episode_reward_term("upright")] == pytest.approx(2.0 / 3)


def test_episode_stats_monitor_logs_dropped_rollouts_and_messages(rig):
    trainer, module, link, channel = rig
    monitor = EpisodeStatsMonitor()
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    link.transport.dropped, channel.dropped = 3, 5
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    assert module.logged[keys.RING_DROPPED] == 3.0
    assert module.logged[keys.METRICS_DROPPED] == 5.0


def test_collector_link_of_a_data_module_not_running_its_collector_says_so(rig):
    trainer, module, _, _ = rig
    trainer.datamodule = RolloutDataModule(CollectorOptions("CartpoleSwingup", 2), num_steps=2)
    with pytest.raises(RuntimeError, match="RolloutDataModule runs no collector now"):
        ObsNormSync().on_train_start(trainer, module)


def test_callbacks_refuse_a_data_module_without_a_collector_link(rig):
    trainer, module, _, _ = rig
    trainer.datamodule = SimpleNamespace()
    with pytest.raises(TypeError, match="needs a data module with a `collector_link`"):
        WeightSync().on_train_start(trainer, module)


def test_episode_stats_monitor_state_round_trips(rig):
    trainer, module, link, channel = rig
    monitor = EpisodeStatsMonitor(window=2)
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    channel.messages.append(_episodes([5.0, 7.0], [1, 1], [0.0, 0.0]))
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    restored = EpisodeStatsMonitor(window=2)
    restored.load_state_dict(monitor.state_dict())
    module.logged.clear()
    restored.on_train_start(trainer, module)
    restored.on_train_batch_start(trainer, module, None, 1)
    restored.on_train_batch_end(trainer, module, None, None, 1)
    assert module.logged[keys.MEAN_REWARD] == pytest.approx(6.0)
    assert module.logged[keys.NONFINITE_RESETS] == 1.0


def test_episode_stats_monitor_loads_a_state_without_later_keys(rig):
    trainer, module, link, channel = rig
    monitor = EpisodeStatsMonitor(window=2)
    monitor.load_state_dict({"episodes": {"return": [4.0, 6.0]}})  # no nonfinite_resets yet
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    assert module.logged[keys.MEAN_REWARD] == pytest.approx(5.0)
    assert module.logged[keys.NONFINITE_RESETS] == 0.0
    empty = EpisodeStatsMonitor()
    empty.load_state_dict({})
    assert empty.state_dict() == {"episodes": {}, "nonfinite_resets": 0}


def test_rl_checkpoint_loads_a_state_without_rng_states_and_leaves_the_generators():
    checkpoint = RLCheckpoint()
    checkpoint.load_state_dict({})
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    checkpoint.on_train_start(SimpleNamespace(), None)
    assert torch.equal(torch.rand(2), expected)


def test_episode_stats_monitor_logs_only_progress_bar_keys_between_logger_writes(rig):
    trainer, module, link, channel = rig
    trainer.log_every_n_steps, trainer.global_step = 2, 1  # the loggers write at steps 2, 4, ...
    monitor = EpisodeStatsMonitor()
    monitor.on_train_start(trainer, module)
    monitor.on_train_batch_start(trainer, module, None, 0)
    channel.messages.append(_episodes([5.0], [1], [0.0]))
    monitor.on_train_batch_end(trainer, module, None, None, 0)
    assert set(module.logged) == {keys.ENV_STEPS, keys.MEAN_REWARD, keys.TOTAL_FPS}
