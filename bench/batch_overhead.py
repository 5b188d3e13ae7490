"""The TensorDict bookkeeping of one learner iteration over the same work on plain dicts.

Issue 19 moved the data → algorithm boundary to ``TensorDict``s. This bench times, in one
process on random tensors, what that bookkeeping adds to an iteration, outside the networks:

- APPO (``[T, M]`` rollout): building the item (:func:`~unilab_lit.data.staging.rollout_batch`,
  per-column entries broadcast over T), masking the fresh columns' observations, building the
  prepared ``TensorDict`` and flattening it, and gathering ``epochs x mini-batches`` random
  minibatches; the dict baseline does the same per key (``[M]`` per-column entries).
- off-policy (``[R]`` replay rows): building the prepared ``TensorDict`` and splitting it into
  ``updates`` minibatches; the dict baseline slices per key.

For scale it also times APPO's minibatch loss and backward at the given widths (the work the
bookkeeping sits beside). Rounds alternate the two sides; threads: 1, as the learner on 2 cores.

    python bench/batch_overhead.py                      # configs/appo.yaml and fast_td3.yaml sizes
    python bench/batch_overhead.py --columns 256 --rounds 5
    python bench/batch_overhead.py --smoke              # a few seconds (CI)
"""

from __future__ import annotations

import argparse
import time

from smoke import parse_args


def _per_call_ms(fn, repeats: int) -> float:
    fn()
    began = time.perf_counter()
    for _ in range(repeats):
        fn()
    return 1e3 * (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-steps", type=int, default=32, help="APPO rollout length T")
    parser.add_argument("--columns", type=int, default=128, help="APPO columns M (envs x staged)")
    parser.add_argument("--obs", type=int, default=5, help="observation width")
    parser.add_argument("--epochs", type=int, default=2, help="APPO learning epochs")
    parser.add_argument("--mini-batches", type=int, default=4, help="APPO minibatches per epoch")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64], help="APPO widths")
    parser.add_argument("--rows", type=int, default=512, help="replay rows R of one item")
    parser.add_argument("--updates", type=int, default=2, help="off-policy minibatches per item")
    parser.add_argument("--repeats", type=int, default=200, help="calls per timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds")
    args = parse_args(parser, columns=16, rows=64, repeats=3, rounds=1)

    import torch
    from tensordict import TensorDict

    from unilab_lit.algos.appo import APPO
    from unilab_lit.data.staging import rollout_batch

    torch.set_num_threads(1)
    t, m, d = args.num_steps, args.columns, args.obs
    steps = {k: torch.randn(t, m, d) for k in ("obs", "critic_obs", "actions", "final_critic_obs")}
    steps.update({k: torch.randn(t, m) for k in ("log_prob", "reward")})
    steps.update({k: torch.zeros(t, m, dtype=torch.bool) for k in ("done", "truncated")})
    columns = {
        "last_critic_obs": torch.randn(m, d),
        "policy_version": torch.zeros(m, dtype=torch.int64),
        "fresh": torch.rand(m) < 0.5,
    }
    prepared = {k: torch.randn(t, m, d) for k in ("obs", "critic_obs", "target_mean")}
    prepared.update({k: torch.randn(t, m) for k in ("values", "returns", "advantages")})
    size = t * m // args.mini_batches
    count = args.epochs * args.mini_batches

    def appo_tensordict() -> None:
        item = rollout_batch(steps, columns)
        fresh = item["fresh"]
        item["obs"][fresh], item["critic_obs"][fresh]
        flat = TensorDict(prepared, batch_size=[t, m]).reshape(-1)
        for _ in range(count):
            flat[torch.randperm(t * m)[:size]]

    def appo_dict() -> None:
        item = {**steps, **columns}
        fresh = item["fresh"]
        item["obs"][:, fresh], item["critic_obs"][:, fresh]
        flat = {k: v.flatten(0, 1) for k, v in prepared.items()}
        for _ in range(count):
            idx = torch.randperm(t * m)[:size]
            {k: v[idx] for k, v in flat.items()}

    r = args.rows
    rows = {k: torch.randn(r, d) for k in ("obs", "next_obs", "critic_obs", "next_critic_obs")}
    rows.update({"actions": torch.randn(r, 1), "reward": torch.randn(r), "discount": torch.rand(r)})

    def offpolicy_tensordict() -> None:
        TensorDict(rows, batch_size=[r]).split(r // args.updates)

    def offpolicy_dict() -> None:
        part = r // args.updates
        for u in range(args.updates):
            {k: v[u * part : (u + 1) * part] for k, v in rows.items()}

    model = APPO(d, d, d, actor_hidden_dims=args.hidden, critic_hidden_dims=args.hidden)
    mb = TensorDict(
        {
            "obs": torch.randn(size, d),
            "critic_obs": torch.randn(size, d),
            "actions": torch.randn(size, d),
            "behaviour_log_prob": torch.randn(size),
            "target_log_prob": torch.randn(size),
            "target_mean": torch.randn(size, d),
            "target_std": torch.ones(size, d),
            "values": torch.randn(size),
            "returns": torch.randn(size),
            "advantages": torch.randn(size),
        },
        batch_size=[size],
    )

    def networks() -> None:
        for _ in range(count):
            model._minibatch_loss(mb)[0].backward()

    print(
        f"APPO item [{t}, {m}], width {d}, {count} minibatches of {size} rows, "
        f"widths {args.hidden}; replay item [{r}] in {args.updates} minibatches; 1 thread",
        flush=True,
    )
    for index in range(args.rounds):
        appo_td = _per_call_ms(appo_tensordict, args.repeats)
        appo_plain = _per_call_ms(appo_dict, args.repeats)
        off_td = _per_call_ms(offpolicy_tensordict, args.repeats)
        off_plain = _per_call_ms(offpolicy_dict, args.repeats)
        nets = _per_call_ms(networks, max(1, args.repeats // 20))
        print(
            f"round {index}: APPO bookkeeping TensorDict {appo_td:.3f} ms, dict "
            f"{appo_plain:.3f} ms, ratio {appo_td / appo_plain:.2f}, difference "
            f"{100 * (appo_td - appo_plain) / nets:+.1f}% of the {nets:.1f} ms of minibatch "
            f"losses and backward; off-policy TensorDict {off_td:.3f} ms, dict "
            f"{off_plain:.3f} ms, ratio {off_td / off_plain:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
