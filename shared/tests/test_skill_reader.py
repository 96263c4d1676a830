"""The skill-reading warm start of the CPU scale (`agentrl_shared.skill_reader`): made-up objects only, rows played by
the RL rollout code with the trainer's teacher prompts, and supervised fine-tuning on completion tokens only."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_shared.envs.textrooms import ROOM_OBJECTS, solution_actions
from agentrl_shared.models import tiny_qwen3
from agentrl_shared.skill_reader import sft, skill_rows, synthetic_tasks
from agentrl_shared.skills import SKILL_HEADER, skill_text


def test_synthetic_tasks_name_no_real_object_and_are_seeded():
    tasks, room_objects = synthetic_tasks(16)
    real = {o for objects in ROOM_OBJECTS.values() for o in objects[2:]}
    assert sorted(room_objects) == sorted(ROOM_OBJECTS)
    made_up = [o for objects in room_objects.values() for o in objects[2:]]
    assert len(made_up) == len(set(made_up)) == 6 * len(ROOM_OBJECTS) and not set(made_up) & real
    assert all(t["object"] in room_objects[t["room"]][2:] and t["room"] in t["rooms"] for t in tasks)
    assert {t["task_type"] for t in tasks} == {"find", "fetch"}
    assert synthetic_tasks(16) == (tasks, room_objects)


def test_rows_are_solved_episodes_with_the_teacher_prompt_of_the_targets_room():
    tok = AutoTokenizer.from_pretrained(tiny_qwen3())
    tasks, room_objects = synthetic_tasks(8)
    rows = skill_rows(tok, tasks, room_objects)
    assert len(rows) == sum(len(solution_actions(t)) for t in tasks)  # find: 1 row, fetch: 2
    by_episode = {}
    for row in rows:
        by_episode.setdefault(row.episode_id, []).append(row)
    for i, task in enumerate(tasks):
        episode = by_episode[i]
        assert [r.action for r in episode] == solution_actions(task) and all(r.is_action_valid for r in episode)
        for row in episode:
            teacher = tok.decode(row.teacher_prompt_ids)
            assert teacher.startswith(SKILL_HEADER + skill_text("textrooms", "general"))
            assert teacher.endswith(row.prompt_text)  # the skill block before the whole student prompt (legacy)
            assert task["object"] in teacher and f"go to the {task['room']}" in teacher
            assert all(f"go to the {r}" not in teacher for r in ROOM_OBJECTS if r != task["room"])
            assert tok.decode(row.completion_ids) == f"{row.action}</action><|im_end|>"


def test_sft_loss_is_the_token_mean_over_completion_tokens_and_it_learns():
    tok = AutoTokenizer.from_pretrained(tiny_qwen3())
    tasks, room_objects = synthetic_tasks(4)
    rows = skill_rows(tok, tasks, room_objects)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3(), dtype=torch.float32)
    # reference: each row on its own (no padding), cross-entropy summed over its completion tokens, over all tokens
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows[:3]:
            ids = torch.tensor([row.teacher_prompt_ids + row.completion_ids])
            logits = model(input_ids=ids).logits[0, len(row.teacher_prompt_ids) - 1 : -1]
            total += torch.nn.functional.cross_entropy(logits, torch.tensor(row.completion_ids), reduction="sum")
            count += len(row.completion_ids)
    losses = sft(model, rows[:3], tok.pad_token_id, lr=0.0, rows_per_step=3)
    assert abs(losses[0] - (total / count).item()) < 1e-4
    first = sft(model, rows, tok.pad_token_id, lr=1e-3, rows_per_step=len(rows))
    again = sft(model, rows, tok.pad_token_id, lr=0.0, rows_per_step=len(rows))
    assert again[0] < first[0]
