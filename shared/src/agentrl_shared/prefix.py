"""Shared-prefix log-probs: a prefix common to several prompts (the self-teacher's skill block, the chat header) is run
once per micro-batch, its keys/values expanded to the rows that share it, and only the rows' suffixes are run.

The plain forward (TRL `GRPOTrainer._get_per_token_logps_and_entropies`) runs every row's whole left-padded prompt
and completion. Here, per micro-batch, exactly two forwards run on every rank whatever the rows (ZeRO-3 gathers the
parameters once per forward, so the ranks stay in lock-step):
1. the K distinct prefixes, right-padded, with `use_cache` (keys/values of every layer, `logits_to_keep=1`);
2. the B suffixes (the rest of each prompt, then the completion) against the prefix cache selected per row
   (`Cache.batch_select_indices`), with position ids that continue each row's prefix and a 2D attention mask over
   [prefix | suffix], scored by TRL's fused LM head as the plain forward is (`add_fused_lm_head`: log-probs of the
   completion tokens at the temperature TRL set on the head).
Attention is the same function of the same keys and values at the same relative positions (RoPE depends on position
differences only; the plain forward's positions are shifted by the row's left padding), so the log-probs equal the
plain forward's up to float rounding (tested at atol 1e-5 in fp32 on SmolLM2-135M).

With grad (the policy's loss forward, `shared_prefix_logps_and_entropies`), the gradient reaches the prefix forward
through the cache: `DynamicLayer.update` concatenates and `batch_select_indices` indexes (transformers 5.17
`cache_utils.py`), both differentiable, so the backward also runs each prefix once, its key/value gradients summed
over the rows that read them. Under gradient checkpointing a training-mode layer drops `past_key_values`
(transformers 5.17 `modeling_layers.GradientCheckpointingLayer.__call__`), so this path needs it off.

Grouping (`prefix_plan`): rows sorted by their tokens (rows sharing a prefix become neighbours), then split into
contiguous groups by an exact dynamic program over the cost model "tokens run" (a group's prefix once, plus every
member's suffix); a group's prefix is its members' longest common prefix, kept one token short of the shortest
member prompt so that the token predicting the first completion token is in the suffix.
"""

import torch
from torch import Tensor
from transformers import DynamicCache, PretrainedConfig


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def prefix_plan(prompts: list[list[int]]) -> tuple[list[int], list[int], list[int]]:
    """Group rows by shared prompt prefix so that the tokens run (each group's prefix once, plus each row's rest of
    the prompt) are fewest.

    Returns:
        `(group, prefix_len, first)`: `group[b]` the group of row b, `prefix_len[k]` the prefix length of group k
        (< the length of every member prompt), `first[k]` a member row of group k (its prompt holds the prefix).
    """
    order = sorted(range(len(prompts)), key=lambda b: prompts[b])
    lens = [len(prompts[b]) for b in order]
    adjacent = [common_prefix_len(prompts[order[i]], prompts[order[i + 1]]) for i in range(len(order) - 1)]
    # best[j]: fewest tokens for the sorted rows [0, j); cut[j]: where its last group starts
    best, cut = [0] + [None] * len(order), [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        shared, shortest, total = None, lens[j - 1], 0
        for i in range(j - 1, -1, -1):  # the group is sorted rows [i, j)
            shortest, total = min(shortest, lens[i]), total + lens[i]
            if i < j - 1:
                shared = adjacent[i] if shared is None else min(shared, adjacent[i])
            p = min(shortest - 1, shared if shared is not None else shortest - 1)
            cost = best[i] + p + total - (j - i) * p
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    group, prefix_len, first = [0] * len(prompts), [], []
    j, spans = len(order), []
    while j > 0:
        spans.append((cut[j], j))
        j = cut[j]
    for k, (i, j) in enumerate(reversed(spans)):
        members = order[i:j]
        shared = min(len(prompts[b]) - 1 for b in members)
        for b in members[1:]:
            shared = min(shared, common_prefix_len(prompts[members[0]], prompts[b]))
        for b in members:
            group[b] = k
        prefix_len.append(shared)
        first.append(members[0])
    return group, prefix_len, first


def shared_prefix_logps_and_entropies(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    pad_token_id: int,
    compute_entropy: bool = False,
    config: PretrainedConfig | None = None,
) -> tuple[Tensor, Tensor | None]:
    """(B, C) log-probs of the completion tokens and, with `compute_entropy`, (B, C) entropies of the distributions
    that predict them, as TRL's `GRPOTrainer._get_per_token_logps_and_entropies` gives them for `cat(prompt,
    completion)` (trl 1.16 `trainer/grpo_trainer.py`), with each shared prompt prefix run once (module docstring);
    differentiable when grad is enabled. Inputs as TRL lays them out: `prompt_ids`/`prompt_mask` (B, P) left-padded,
    `completion_ids`/`completion_mask` (B, C) right-padded (mask 0 also on rows without loss, which, as in the plain
    forward, then attend to their prompt only). `model` carries TRL's fused LM head (with `"entropy"` among its
    outputs for `compute_entropy`, as `GRPOTrainer` patches the policy). `config`: the model's own config where
    `model` is a wrapper (TRL's loss forward gets the DeepSpeed engine, whose `config` is DeepSpeed's); default
    `model.config`."""
    device = prompt_ids.device
    prompts = [row[m.bool()].tolist() for row, m in zip(prompt_ids.cpu(), prompt_mask.cpu(), strict=True)]
    group, prefix_len, first = prefix_plan(prompts)
    B, C, K = len(prompts), completion_ids.size(1), len(prefix_len)

    # 1. the K prefixes, right-padded (a zero-length prefix runs one pad token that no suffix attends to)
    L = max(max(prefix_len), 1)
    prefix = torch.full((K, L), pad_token_id, dtype=torch.long)
    run_mask = torch.zeros((K, L), dtype=torch.long)  # (K, L) tokens of the prefix forward
    for k, (n, b) in enumerate(zip(prefix_len, first, strict=True)):
        prefix[k, :n] = torch.tensor(prompts[b][:n], dtype=torch.long)
        run_mask[k, : max(n, 1)] = 1
    cache = DynamicCache(config=model.config if config is None else config)
    positions = torch.arange(L).expand(K, L)
    model(input_ids=prefix.to(device), attention_mask=run_mask.to(device), position_ids=positions.to(device),
          past_key_values=cache, use_cache=True, logits_to_keep=1)  # fmt: skip
    cache.batch_select_indices(torch.tensor(group, device=device))  # (K, ...) -> (B, ...) per layer

    # 2. the suffixes: the rest of each prompt, left-padded to S, then the completion (B, C) as given
    rests = [p[prefix_len[group[b]] :] for b, p in enumerate(prompts)]
    S = max(len(r) for r in rests)
    rest = torch.full((B, S), pad_token_id, dtype=torch.long)
    rest_mask = torch.zeros((B, S), dtype=torch.long)
    rest_pos = torch.zeros((B, S), dtype=torch.long)
    for b, r in enumerate(rests):
        n = prefix_len[group[b]]
        rest[b, S - len(r) :] = torch.tensor(r, dtype=torch.long)
        rest_mask[b, S - len(r) :] = 1
        rest_pos[b, S - len(r) :] = torch.arange(n, n + len(r))
    key_mask = torch.zeros((B, L), dtype=torch.long)  # (B, L) the prefix keys each row attends to
    for b in range(B):
        key_mask[b, : prefix_len[group[b]]] = 1
    completion_pos = torch.tensor([len(p) for p in prompts])[:, None] + torch.arange(C)  # (B, C)
    input_ids = torch.cat([rest.to(device), completion_ids], dim=1)  # (B, S + C)
    suffix_mask = torch.cat([rest_mask.to(device), completion_mask], dim=1)  # (B, S + C)
    # labels as TRL's `_get_per_token_logps_and_entropies` builds them: only the completion columns are scored
    labels = input_ids.masked_fill(suffix_mask == 0, -100)
    labels[:, :-C] = -100
    out = model(
        input_ids=input_ids,
        attention_mask=torch.cat([key_mask.to(device), suffix_mask], dim=1),  # (B, L + S + C)
        position_ids=torch.cat([rest_pos, completion_pos], dim=1).to(device),
        past_key_values=cache,
        labels=labels,
        fused_lm_head=True,
    )
    return out.log_probs[:, -C:], out.entropy[:, -C:] if compute_entropy else None  # (B, C) each


def shared_prefix_logps(
    model,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    pad_token_id: int,
) -> Tensor:
    """(B, C) log-probs of the completion tokens alone (`shared_prefix_logps_and_entropies`)."""
    return shared_prefix_logps_and_entropies(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                             pad_token_id)[0]  # fmt: skip


__all__ = ["common_prefix_len", "prefix_plan", "shared_prefix_logps", "shared_prefix_logps_and_entropies"]
