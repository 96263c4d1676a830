"""Format warm start of the CPU scale: gold rows are RL rows with ground-truth completions that pass their checklist,
the end-of-turn token of SmolLM2's template ends completions, and the CPU plan starts every method from the
warm-started model (the SFT itself: shared/tests/test_sft.py)."""

import copy
import json

import pytest
from transformers import AutoTokenizer

from agentrl_shared.models import smollm2_135m, tiny_qwen3
from envace import cli
from envace.data import generate_tasks
from envace.parsing import parse_execution_result, parse_tool_calls
from envace.rehearsal import RehearsalCollector
from envace.reward import RuleJudge
from envace.warmstart import gold_rows


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(tiny_qwen3(), padding_side="left")


def collector(tok, mode="agent"):
    return RehearsalCollector(tok, RuleJudge(), mode, max_completion_length=64, max_model_len=8192,
                              chat_template_kwargs={"enable_thinking": False})  # fmt: skip


def test_gold_rows_are_the_rl_rows_of_a_gold_episode(tok):
    tasks = generate_tasks(6, seed=3, max_turns=2)
    rows = gold_rows(tasks, collector(tok))
    turns = sum(len(t["user_turns"]) for t in tasks)
    assert [r.role for r in rows].count("caller") == 2 * turns and [r.role for r in rows].count("simulator") == turns
    calls = [r for r in rows if r.role == "caller" and "<tool_call>" in r.completion_text]
    sims = [r for r in rows if r.role == "simulator"]
    gold = [(c["function"]["name"], c["function"]["arguments"]) for t in tasks for m in t["reference_messages"]
            if m["role"] == "assistant" for c in m.get("tool_calls") or []]  # fmt: skip
    assert len(calls) == len(sims) == len(gold) == turns
    for row, (name, args) in zip(calls, gold, strict=True):
        [call], error = parse_tool_calls(row.completion_text)
        assert error is None and (call.name, call.arguments) == (name, args)
    refs = [json.loads(m["content"]) for t in tasks for m in t["reference_messages"] if m["role"] == "tool"]
    for row, ref in zip(sims, refs, strict=True):
        content, is_error = parse_execution_result(row.completion_text)
        assert not is_error and json.loads(content) == ref
        assert "RL model's latest response:" in tok.decode(row.prompt_ids)  # the rehearsal prompt of the RL rollout
    # completions end with the template's end-of-turn token; the first caller prompt is the RL rollout's prompt
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    assert all(r.completion_ids[-1] == eot for r in rows)
    c = collector(tok)
    assert rows[0].prompt_ids == c._initial_ids(tasks[0])[1]
    assert [r.role for r in gold_rows(tasks, collector(tok), rehearsal_rows=False)] == ["caller"] * (2 * turns)


def test_gold_rows_refuse_a_gold_episode_that_fails_its_checklist(tok):
    [task] = generate_tasks(1, seed=5, max_turns=1)
    bad = copy.deepcopy(task)
    bad["reference_messages"][-1]["content"] = "I do not know."  # the reply no longer states the value
    with pytest.raises(RuntimeError, match="do not pass the checklist"):
        gold_rows([bad], collector(tok))
    with pytest.raises(ValueError, match="tool_return_mode='agent'"):
        gold_rows([task], collector(tok, "real"))


def test_smollm2_completions_end_at_the_template_end_of_turn():
    tok = AutoTokenizer.from_pretrained(smollm2_135m(), padding_side="left")
    c = RehearsalCollector(tok, RuleJudge(), "real", max_completion_length=64, max_model_len=8192,
                           tools_in_system_prompt=True)  # fmt: skip
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.eos_token_id != im_end and c.end_of_turn_id == im_end  # the GGUF tokenizer's EOS is <|im_start|>
    ids = tok("The temperature c is 21.", add_special_tokens=False).input_ids + [im_end]
    assert c._decode(ids) == "The temperature c is 21."
    tail = c._extension_ids(ids, [{"role": "user", "content": "next"}])
    assert im_end not in tail[:1]  # the context is not closed twice
    assert tok.decode(ids + tail).count("<|im_end|>") == 2  # the reply's and the new user message's


def test_cpu_plan_starts_every_method_from_the_warm_start(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cli, "warm_start", lambda cfg, method: calls.append((method, cfg)))
    monkeypatch.setattr(cli, "train", lambda cfg, method: calls.append((method, cfg)))
    monkeypatch.setattr(cli, "evaluate_model", lambda cfg, method, tts: calls.append((method, cfg)))
    cli.reproduce("cpu", [0], ["warmstart.num_tasks=3"], tmp_path)
    methods = [m for m, _ in calls]
    assert methods[0] == "warmstart" and set(methods) == {
        "warmstart", "untrained", "caller_only_real", "envace", "tts_parallel_untrained", "tts_parallel_envace",
        "tts_sequential_untrained", "tts_sequential_envace"}  # fmt: skip
    model = {m: cfg["model"].name_or_path for m, cfg in calls}
    assert model["warmstart"] == "smollm2-135m"
    ws = str(tmp_path / "cpu" / "warmstart" / "seed0" / "final")
    for m in ("untrained", "caller_only_real", "envace", "tts_parallel_untrained", "tts_sequential_untrained"):
        assert model[m] == ws, m
    assert model["tts_parallel_envace"] == str(tmp_path / "cpu" / "envace" / "seed0" / "final")
    calls.clear()
    cli.reproduce("cpu", [0], ["warmstart.num_tasks=0"], tmp_path / "nows")
    assert "warmstart" not in [m for m, _ in calls]
    assert {cfg["model"].name_or_path for m, cfg in calls if m == "untrained"} == {"smollm2-135m"}


def test_report_names_the_warm_start_and_its_figures():
    from envace.report import cpu_table

    cfg = {"trainer": {"tts_budget": 2}, "env": {"eval_episodes": 16}}
    untrained = {"commit": "abc1234", "config": cfg, "final": {"reward_mean": 0.75, "success_mean": 0.5}}
    warm = {"commit": "abc1234", "seed": 0, "rows": {"caller": 16, "simulator": 8}, "tokens": 12000,
            "losses": [0.84, 0.3, 0.14], "train_seconds": 240.0}  # fmt: skip
    table = cpu_table({"untrained": [untrained], "warmstart": [warm]})
    assert "untrained (SmolLM2-135M-Instruct + format warm start, no RL) | episode reward R % | n/a (our tasks) | " \
           "75.0 (1 seed)" in table  # fmt: skip
    assert "16 caller + 8 rehearsal rows, 12000 tokens, loss 0.840 -> 0.140 over 3 steps, 240 s" in table
    bare = cpu_table({"untrained": [untrained]})
    assert "untrained (SmolLM2-135M-Instruct) |" in bare and "Format warm start: not run" in bare


def test_warm_start_run_saves_a_model_and_its_figures(tmp_path):
    """`cli.warm_start` (as `reproduce` runs it) on the smoke config (tiny random Qwen3) with 2 generated tasks: the model is saved where
    the plan's methods load it, and `results.json` counts the rows per role and one loss per step."""
    from transformers import AutoModelForCausalLM

    cfg = cli.load(
        "smoke", ["warmstart.num_tasks=2", "warmstart.batch_rows=2", f"trainer.output_dir={tmp_path / 'ws'}"]
    )
    payload = cli.warm_start(cfg, "warmstart", tmp_path)
    saved = json.loads((tmp_path / "ws" / "results.json").read_text())
    assert saved["rows"] == payload["rows"] and payload["rows"]["caller"] > 0
    assert len(saved["losses"]) == -(-sum(payload["rows"].values()) // 2)
    AutoModelForCausalLM.from_pretrained(tmp_path / "ws" / "final")
