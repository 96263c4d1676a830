"""Shared-prefix forwards: the grouping; the teacher's log-probs equal to the plain forward (SmolLM2-135M, fp32); the
policy's log-probs, entropies and parameter gradients equal to the plain forward's (tiny Qwen3, fp32)."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.trainer.utils import add_fused_lm_head

from agentrl_shared.batch import rows_to_batch
from agentrl_shared.envs import load_tasks
from agentrl_shared.models import model_path, tiny_qwen3
from agentrl_shared.prefix import prefix_plan, shared_prefix_logps, shared_prefix_logps_and_entropies
from agentrl_shared.skills import teacher_prompt, teacher_skills


def test_prefix_plan_groups_rows_by_their_shared_prefix():
    a, b = [1] * 10, [2] * 8
    prompts = [a + [5, 6], b + [7], a + [8], [9, 9, 9], a + [5, 4, 3]]
    group, prefix_len, first = prefix_plan(prompts)
    # the three rows opening with `a` share it (and rows 0 and 4 one more token, too few to pay a group of their own)
    assert group[0] == group[2] == group[4] and len({group[0], group[1], group[3]}) == 3
    assert prefix_len[group[0]] == 10
    assert prefix_len[group[1]] == len(prompts[1]) - 1 and prefix_len[group[3]] == 2  # one row: all but one token
    for row, k in enumerate(group):
        assert (
            prefix_len[k] < len(prompts[row]) and prompts[first[k]][: prefix_len[k]] == prompts[row][: prefix_len[k]]
        )
    assert prefix_plan([[3]]) == ([0], [0], [0])  # the pad row of an empty micro-batch: no prefix


@pytest.fixture(scope="module")
def smollm2():
    path = model_path("smollm2-135m")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    add_fused_lm_head(model, temperature=0.7)  # as GRPOTrainer patches the policy
    return AutoTokenizer.from_pretrained(path), model


def _plain(model, b):
    """TRL's `_get_per_token_logps_and_entropies` forward of whole left-padded rows."""
    ids = torch.cat([b["prompt_ids"], b["completion_ids"]], 1)
    mask = torch.cat([b["prompt_mask"], b["completion_mask"]], 1)
    C = b["completion_ids"].size(1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-C] = -100
    return model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True).log_probs[:, -C:]


@pytest.mark.parametrize("position", ["legacy", "user"])
def test_shared_prefix_logps_equal_the_plain_forward(smollm2, position):
    tok, model = smollm2
    every = load_tasks("textrooms", "train", num_tasks=40)
    tasks = [t for kind in ("find", "fetch") for t in [u for u in every if u["task_type"] == kind][:3]]  # 2 skill sets
    prompts, completions = [], []
    for i, task in enumerate(tasks):
        for turn in range(1 + i % 2):
            text = tok.apply_chat_template(
                [{"role": "system", "content": "You play TextRooms."},
                 {"role": "user", "content": f"{task['instruction']} Turn {turn}: you are in the hallway."}],
                tokenize=False, add_generation_prompt=True,
            )  # fmt: skip
            prompts.append(tok(teacher_prompt(text, teacher_skills("textrooms", task, text), position))["input_ids"])
            completions.append(tok(f"<action>go to room {i}</action>" + " look" * (i % 3))["input_ids"])
    assert len({teacher_skills("textrooms", t, "") for t in tasks}) > 1  # two skill blocks in the micro-batch
    carries = [i % 4 != 3 for i in range(len(prompts))]  # rows without loss attend to their prompt only, as in TRL
    batch, _ = rows_to_batch(prompts, completions, carries, [0.0] * len(prompts), tok.pad_token_id)
    with torch.no_grad():
        plain = _plain(model, batch)
        shared = shared_prefix_logps(model, *(batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids",
                                                                 "completion_mask")), tok.pad_token_id)  # fmt: skip
    mask = batch["completion_mask"].bool()
    assert shared.shape == plain.shape
    # the unshared forward of each row alone, unpadded (positions from 0, as the shared path gives them)
    alone = torch.zeros_like(plain)
    with torch.no_grad():
        for i in range(len(prompts)):
            one, _ = rows_to_batch([prompts[i]], [completions[i]], [True], [0.0], tok.pad_token_id)
            alone[i, : len(completions[i])] = _plain(model, one)[0]
    # atol 1e-5 plus 1e-5 of |log-prob| (up to ~25 here): fp32 rounds a log-softmax over SmolLM2's 49k-token
    # vocabulary at ~1e-6 relative, and attention over a cache of other length sums in another order
    torch.testing.assert_close(shared[mask], alone[mask], atol=1e-5, rtol=1e-5)
    # TRL's padded batch is itself 2.7e-5 to 4.2e-5 from the rows alone (RoPE at pad-shifted positions, measured on
    # this batch), so against it the bound is that rounding
    torch.testing.assert_close(shared[mask], plain[mask], atol=5e-5, rtol=0)
    group, prefix_len, _ = prefix_plan(prompts)
    assert len(prefix_len) < len(prompts) and min(prefix_len) > 50  # real sharing: skill block and chat header


def test_empty_micro_batch_runs_the_same_two_forwards(smollm2):
    """A rank with no rows runs the pad row (ZeRO-3 lock-step); its forwards must run and match the plain one."""
    tok, model = smollm2
    batch, _ = rows_to_batch([], [], [], [], tok.pad_token_id)
    calls = []
    hook = model.register_forward_pre_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        shared = shared_prefix_logps(model, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"],
                                     batch["completion_mask"], tok.pad_token_id)  # fmt: skip
    hook.remove()
    assert len(calls) == 2 and torch.isfinite(shared).all()


def test_shared_prefix_policy_forward_has_the_plain_forwards_log_probs_entropies_and_gradients():
    """The loss forward with grad (`shared_prefix_policy`): a GRPO-like micro-batch with a group's identical first-turn
    prompts, second turns that share the chat header and first observation, a row that shares nothing, a row without
    loss and left padding. Log-probs, entropies and every parameter's gradient of a loss over them equal TRL's plain
    forward (the gradient reaches the prefix forward through the cache) and each row's own unpadded forward."""
    path = tiny_qwen3()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))  # as GRPOTrainer patches the policy

    def chat(user):
        return tok.apply_chat_template([{"role": "system", "content": "You play TextRooms."},
                                        {"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)  # fmt: skip

    first = chat("Find the key. Turn 1: the hallway. Doors: 1, 2, 3.")
    second = [chat("Find the key. Turn 1: the hallway. Doors: 1, 2, 3. You took door 2. Turn 2: a kitchen."),
              chat("Find the key. Turn 1: the hallway. Doors: 1, 2, 3. You took door 3. Turn 2: a long garden path.")]  # fmt: skip
    texts = [first, first, second[0], first, second[1], "No chat header here at all.", second[0]]
    prompts = [tok(t)["input_ids"] for t in texts]
    completions = [tok(f"<action>go to door {i}</action>" + " look" * (i % 3))["input_ids"] for i in range(7)]
    carries = [True, True, True, False, True, True, True]
    advantages = [1.0, -0.5, 0.3, 0.0, 2.0, -1.0, 0.7]
    batch, info = rows_to_batch(prompts, completions, carries, advantages, tok.pad_token_id)
    group, prefix_len, _ = prefix_plan(prompts)
    assert len(prefix_len) < len(set(map(tuple, prompts))) and group.count(group[5]) == 1  # sharing, and a lone row

    def loss(logps, entropies, b):  # a token-mean policy term with an entropy bonus, as the GRPO loss has
        m = b["completion_mask"].float()
        return -((logps * b["advantages"][:, None] + 0.01 * entropies) * m).sum() / info["loss_tokens"]

    def run(forward, b):
        model.zero_grad(set_to_none=True)
        logps, entropies = forward(b)
        loss(logps, entropies, b).backward()
        return logps.detach(), entropies.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    def plain(b):  # TRL `_get_per_token_logps_and_entropies` (trl 1.16) on whole left-padded rows
        ids = torch.cat([b["prompt_ids"], b["completion_ids"]], 1)
        mask = torch.cat([b["prompt_mask"], b["completion_mask"]], 1)
        C = b["completion_ids"].size(1)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-C] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -C:], out.entropy[:, -C:]

    def shared(b):
        return shared_prefix_logps_and_entropies(model, b["prompt_ids"], b["prompt_mask"], b["completion_ids"],
                                                 b["completion_mask"], tok.pad_token_id, compute_entropy=True)  # fmt: skip

    want = run(plain, batch)
    got = run(shared, batch)
    # each row alone, unpadded: the gradient of the summed per-row losses
    model.zero_grad(set_to_none=True)
    alone_logps, alone_entropies = torch.zeros_like(want[0]), torch.zeros_like(want[1])
    for i in range(len(prompts)):
        one, _ = rows_to_batch([prompts[i]], [completions[i]], [carries[i]], [advantages[i]], tok.pad_token_id)
        logps, entropies = plain(one)
        loss(logps, entropies, one).backward()
        alone_logps[i, : len(completions[i])], alone_entropies[i, : len(completions[i])] = logps[0], entropies[0]
    alone = (alone_logps.detach(), alone_entropies.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    mask = batch["completion_mask"].bool()
    for reference in (want, alone):
        torch.testing.assert_close(got[0][mask], reference[0][mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(got[1][mask], reference[1][mask], atol=1e-5, rtol=0)
        for name, grad in reference[2].items():
            torch.testing.assert_close(got[2][name], grad, atol=1e-5, rtol=0, msg=name)
    assert all(g.abs().max() > 1e-4 for g in got[2].values())  # every parameter gets a gradient
