"""HF generation back end: bf16 autocast on CPU, and one batched evaluation pass equal to episodes played alone."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_shared.envs import load_tasks, make_env
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.evaluation import run_panel
from agentrl_shared.generation import HFGenerator, SampledTokenLogps, load_eval_model
from agentrl_shared.models import tiny_qwen3
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import RolloutCollector


@pytest.fixture(scope="module")
def tiny():
    path = tiny_qwen3()
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tok


def _batch(tok):
    texts = ["You are in the hallway. Doors lead to: kitchen, garage.", "Task: find the apple.", "<action>go to"]
    enc = tok(texts, return_tensors="pt", padding=True)
    return enc.input_ids, enc.attention_mask


def test_bf16_autocast_forward_and_backward_are_finite_and_keep_the_argmax(tiny):
    model, tok = tiny
    ids, mask = _batch(tok)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).logits.float()  # (B, T, V) fp32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))
    assert out.logits.dtype == torch.bfloat16  # autocast really ran the matmuls in bf16
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    model.zero_grad(set_to_none=True)
    # same argmax wherever fp32's top-2 margin exceeds bf16's rounding (8 bits of mantissa: ~0.4% of the logit scale)
    top2 = ref.topk(2, dim=-1).values
    confident = (top2[..., 0] - top2[..., 1]) > 0.02 * ref.abs().amax(dim=-1)
    confident &= mask.bool()
    assert confident.sum() > 0
    assert torch.equal(out.logits.float().argmax(-1)[confident], ref.argmax(-1)[confident])


def test_hf_generator_autocast_generates_in_bf16(tiny, monkeypatch):
    model, tok = tiny
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    prompts = [
        tok("<action>go to", add_special_tokens=False).input_ids,
        tok("Task:", add_special_tokens=False).input_ids,
    ]
    completions, logps = HFGenerator(model, tok, 4, temperature=0.0, autocast_dtype=torch.bfloat16)(prompts)
    assert logps is None and len(completions) == 2 and all(1 <= len(c) <= 4 for c in completions)
    assert seen and all(seen)
    seen.clear()
    HFGenerator(model, tok, 4, temperature=0.0)(prompts)  # default: the weights' own precision
    assert seen and not any(seen)


def test_sampled_token_logps_equal_the_forward_of_the_whole_row(tiny):
    """The log-probs recorded from the logits HF generation sampled with equal those of a plain forward of each row
    (prompt, then completion) at the sampling temperature, TRL's theta_old, to float rounding in fp32; a completion
    cut short (after an EOS) keeps its first tokens' log-probs."""
    model, tok = tiny
    prompts = [
        tok(t, add_special_tokens=False).input_ids for t in ("<action>go to", "Task: find the apple. You are in")
    ]
    torch.manual_seed(0)
    with SampledTokenLogps(model, temperature=0.7) as record:
        completions, _ = HFGenerator(model, tok, 6, temperature=0.7)(prompts)
    completions[1] = completions[1][:3]  # as if it had stopped at an EOS
    recorded = record.rows(completions)
    assert [len(r) for r in recorded] == [len(c) for c in completions] and len(recorded[0]) == 6
    for prompt, completion, logps in zip(prompts, completions, recorded, strict=True):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / 0.7  # (C, V)
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(logps), expected, atol=1e-5, rtol=0)


def test_one_batched_evaluation_pass_equals_episodes_played_alone(tiny):
    """The whole panel in one pass (one generation call per turn, left-padded) gives the episodes that playing each
    (task, seed) alone gives: greedy decoding is unaffected by the batch it runs in."""
    model, tok = tiny
    tasks = load_tasks("textrooms", "valid_seen", num_tasks=6, num_rooms=3)
    seeds = [1000, 1001]
    generate = HFGenerator(model, tok, 6, temperature=0.0)
    records = {}
    for slots in (1, len(tasks) * len(seeds)):
        calls = []

        def counting(prompt_ids, calls=calls):
            calls.append(len(prompt_ids))
            return generate(prompt_ids)

        with EnvPool(lambda: make_env("textrooms"), num_slots=slots, num_workers=0) as pool:
            collector = RolloutCollector(pool, make_prompt("textrooms"), tok, max_turns=2, max_prompt_length=512)
            records[slots] = run_panel(collector, counting, tasks, seeds, progress=lambda _: None)
        if slots > 1:
            assert calls[0] == 12 and len(calls) <= 2  # one batched call per turn for the whole panel
    alone, batched = records[1], records[12]
    assert [(r["task_id"], r["seed"]) for r in alone] == [(r["task_id"], r["seed"]) for r in batched]
    assert [r["actions"] for r in alone] == [r["actions"] for r in batched]
    assert [r["won"] for r in alone] == [r["won"] for r in batched]


def test_load_eval_model_in_the_asked_dtype_on_the_cpu_when_asked():
    model = load_eval_model(tiny_qwen3(), "bfloat16", use_cpu=True)
    assert model.device.type == "cpu" and model.dtype == torch.bfloat16
