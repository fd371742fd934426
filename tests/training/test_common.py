"""lab.training.common: the fit loop driver (best epoch, early stopping, loss curve, learning-rate schedule) on a
tiny real torch model, and the patience rule against lab.training.reranker.early_stop."""
from __future__ import annotations

import random

import pytest

from lab.training.common import Best, FitOptions, fit, lr_factor, restore_best
from lab.training.reranker import early_stop


def tiny_model():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    x, y = torch.randn(6, 3), torch.randn(6, 1)
    batches = [(x[i : i + 2], y[i : i + 2]) for i in range(0, 6, 2)]  # 3 steps per epoch
    return model, opt, batches


def mse(model):
    def loss_of(batch, epoch):
        x, y = batch
        return ((model(x) - y) ** 2).mean()
    return loss_of


def scripted(model, scores: list[float], states: list):
    """validate(): the next figure of ``scores``, keeping a copy of the weights it was given for."""
    it = iter(scores)

    def validate():
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return next(it), f"extra {len(states)}"
    return validate


def test_fit_keeps_the_best_epoch_and_stops_after_patience_epochs_without_gain():
    model, opt, batches = tiny_model()
    states: list = []
    logs: list[str] = []
    out = fit(model, opt, lambda e: batches, mse(model),
              FitOptions(epochs=6, total_steps=18, warmup=0.1, patience=2),
              clip_params=model.parameters(), best=Best(None, -1.0),
              validate=scripted(model, [0.5, 0.7, 0.6, 0.7, 0.9, 0.9], states), log=logs.append,
              epoch_message=lambda e: f"epoch {e['epoch']}",
              stop_message=lambda stale, best: f"stop {stale} {best.epoch}")
    assert [e["val_ndcg@10"] for e in out.history] == [0.5, 0.7, 0.6, 0.7]  # a tie is no gain
    assert out.stopped_early and out.steps == 12 and logs[-1] == "stop 2 2"
    assert (out.best.epoch, out.best.score, out.best.extra) == (2, 0.7, "extra 2")
    last = {k: v.clone() for k, v in model.state_dict().items()}
    restore_best(model, out)
    import torch

    assert all(torch.equal(model.state_dict()[k], states[1][k]) for k in last)  # epoch 2's weights
    assert not all(torch.equal(last[k], states[1][k]) for k in last)


def test_a_start_no_epoch_beats_counts_and_none_means_never_stop():
    model, opt, batches = tiny_model()
    out = fit(model, opt, lambda e: batches, mse(model), FitOptions(epochs=3, total_steps=9, warmup=0.1, patience=1),
              clip_params=model.parameters(), best=Best(0, 0.8),
              validate=scripted(model, [0.5, 0.9, 0.9], []), log=lambda *a: None)
    assert out.stopped_early and len(out.history) == 1 and out.best == Best(0, 0.8)  # the base model stays best
    before = {k: v.clone() for k, v in model.state_dict().items()}
    restore_best(model, out)  # nothing copied: the model stays as it is
    import torch

    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    model, opt, batches = tiny_model()
    out = fit(model, opt, lambda e: batches, mse(model),
              FitOptions(epochs=3, total_steps=9, warmup=0.1, patience=None),
              clip_params=model.parameters(), best=Best(None, -1.0),
              validate=scripted(model, [0.5, 0.4, 0.3], []), log=lambda *a: None)
    assert not out.stopped_early and len(out.history) == 3 and out.best.epoch == 1
    # patience 0 with a validation: stop after the first epoch (lab.training.embedder's rule)
    model, opt, batches = tiny_model()
    out = fit(model, opt, lambda e: batches, mse(model), FitOptions(epochs=3, total_steps=9, warmup=0.1, patience=0),
              clip_params=model.parameters(), best=Best(None, -1.0),
              validate=scripted(model, [0.5, 0.6, 0.7], []), log=lambda *a: None)
    assert out.stopped_early and len(out.history) == 1


@pytest.mark.parametrize("seed", range(20))
def test_the_patience_rule_is_reranker_early_stop(seed):
    """With no starting figure, fit stops exactly where lab.training.reranker.early_stop says."""
    rng = random.Random(seed)
    scores = [rng.choice([0.3, 0.4, 0.5, 0.6]) for _ in range(8)]
    patience = rng.choice([1, 2, 3])
    model, opt, batches = tiny_model()
    out = fit(model, opt, lambda e: batches[:1], mse(model),
              FitOptions(epochs=8, total_steps=8, warmup=0.1, patience=patience),
              clip_params=model.parameters(), best=Best(None, -1.0),
              validate=scripted(model, scores, []), log=lambda *a: None)
    n = len(out.history)
    assert all(not early_stop(scores[:i], patience) for i in range(1, n))  # it did not stop too late
    assert out.stopped_early == (n < 8) and (n == 8 or early_stop(scores[:n], patience))  # nor too early
    assert out.best.epoch == 1 + scores.index(max(scores[:n]))


def test_loss_curve_points_and_learning_rate_schedule():
    model, opt, batches = tiny_model()
    lrs: list[float] = []
    loss = mse(model)

    def loss_of(batch, epoch):
        lrs.append(opt.param_groups[0]["lr"])
        return loss(batch, epoch)

    out = fit(model, opt, lambda e: batches, loss_of,
              FitOptions(epochs=2, total_steps=6, warmup=0.34, patience=None, log_every=2, flush_each_epoch=True),
              clip_params=model.parameters(), best=Best(None, -1.0), log=lambda *a: None)
    assert [(c["step"], c["epoch"]) for c in out.curve] == [(2, 1), (3, 1), (5, 2), (6, 2)]
    assert lrs == pytest.approx([0.1 * lr_factor(s, 6, 2) for s in range(6)])  # round(0.34 * 6) = 2 warm-up steps
    assert "val_ndcg@10" not in out.history[0] and out.history[0]["train_loss"] > 0
    model, opt, batches = tiny_model()
    out = fit(model, opt, lambda e: batches, mse(model),
              FitOptions(epochs=2, total_steps=6, warmup=0.1, patience=None, log_every=2, flush_each_epoch=False),
              clip_params=model.parameters(), best=Best(None, -1.0), log=lambda *a: None)
    assert [(c["step"], c["epoch"]) for c in out.curve] == [(2, 1), (4, 2), (6, 2)]  # the rest rolls over


def test_fit_options_are_frozen_with_the_loop_defaults():
    import dataclasses

    opts = FitOptions(epochs=2, total_steps=6)
    assert (opts.warmup, opts.patience, opts.log_every, opts.flush_each_epoch, opts.show) == (0.1, None, 5, True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.epochs = 3  # type: ignore[misc]
