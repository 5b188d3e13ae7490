"""``compile_losses``: the compiled losses equal the eager ones, and a compiled fit logs its compile.

Each test compiles with inductor (tens of seconds on a busy CPU): all are ``slow``.
"""

from __future__ import annotations

import logging

import pytest
import torch
from appo_batches import random_batch as rollout
from appo_batches import small_appo
from lightning.pytorch import Callback
from offpolicy_batches import SMALL, RandomBatches, build, loader, make_trainer, random_batch

from unilab_lit.algos.base import COMPILE_SPAN
from unilab_lit.algos.fast_sac import FastSAC
from unilab_lit.algos.fast_td3 import FastTD3
from unilab_lit.telemetry import tracing

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

_TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}


def _assert_compiled_equals_eager(model, loss_fn, minibatch, params) -> None:
    """Loss, logged terms and gradients of ``loss_fn`` and its compiled form, same RNG state."""
    results = []
    for fn in (loss_fn, model._compile(loss_fn)):
        torch.manual_seed(0)
        loss, terms = fn(minibatch)
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        results.append((loss.detach(), {k: v.detach() for k, v in terms.items()}, grads))
    (eager_loss, eager_terms, eager_grads), (loss, terms, grads) = results
    torch.testing.assert_close(loss, eager_loss, **_TOLERANCE)
    assert terms.keys() == eager_terms.keys()
    for key, value in terms.items():
        torch.testing.assert_close(value, eager_terms[key], **_TOLERANCE, msg=key)
    for grad, eager_grad in zip(grads, eager_grads, strict=True):
        if eager_grad is None:
            assert grad is None
        else:
            torch.testing.assert_close(grad, eager_grad, **_TOLERANCE)


@pytest.mark.parametrize("cls", [FastTD3, FastSAC])
def test_compiled_offpolicy_losses_equal_eager_on_the_same_batch(cls):
    torch.manual_seed(0)
    model = build(cls, **SMALL)
    batch = random_batch(torch.Generator().manual_seed(0), 32)
    model._update_normalizers(batch["obs"], batch["critic_obs"])
    minibatch = model._prepare(batch)
    _assert_compiled_equals_eager(
        model, model._critic_loss, minibatch, list(model.critic.parameters())
    )
    _assert_compiled_equals_eager(
        model, model._actor_loss, minibatch, list(model.actor.parameters())
    )


def test_compiled_appo_loss_equals_eager_on_the_same_minibatch():
    torch.manual_seed(0)
    model = small_appo()
    data, _ = model._prepare(rollout(torch.Generator().manual_seed(0), 5))
    minibatch = data.reshape(-1)[:16]
    params = [*model.actor.parameters(), *model.critic.parameters()]
    _assert_compiled_equals_eager(model, model._minibatch_loss, minibatch, params)


def test_compiled_fit_logs_and_traces_its_first_iteration_once(tmp_path, caplog):
    spans = []

    class Recording(Callback):
        def on_train_start(self, trainer, pl_module):
            tracing.install(tracing.TraceRecorder("learner"))

        def on_train_end(self, trainer, pl_module):
            batch = tracing.current().drain()
            tracing.install(None)
            spans.extend(batch.names[i] for i in batch.span_name)

    torch.manual_seed(0)
    model = build(FastTD3, **SMALL, updates_per_step=2, policy_frequency=2, compile_losses=True)
    with caplog.at_level(logging.INFO, logger="unilab_lit.algos.base"):
        make_trainer(tmp_path, 3, callbacks=[Recording()]).fit(
            model, train_dataloaders=loader(RandomBatches(16))
        )
    lines = [r.getMessage() for r in caplog.records if "torch.compile" in r.getMessage()]
    assert len(lines) == 1
    assert "the first iteration of FastTD3 took" in lines[0]
    assert spans.count(COMPILE_SPAN) == 1
    assert model._critic_loss_fn is not model._critic_loss
