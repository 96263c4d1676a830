"""Format warm start for models that do not emit tool calls yet (CPU scale only; not part of the paper's method).

The paper starts both roles from Qwen3-8B, which already writes Qwen3 `<tool_call>` blocks and follows the rehearsal
instruction. The 135M model of the CPU scale does neither: untrained it answers in prose, every episode scores 0 and
GRPO has no signal. `gold_rows` plays each warm-start task once with the ground-truth completions through the same
`RehearsalCollector` the RL rollout uses (so every prompt is token for token an RL prompt): the gold tool call, the
gold rehearsal output (`<execution_result>` with the ground-truth response) and the gold reply; `agentrl_shared.sft`
fits them (cross-entropy on completion tokens, token mean per optimizer step). The
warm-start tasks are drawn from their own seed, disjoint from the training tasks and the evaluation panel.
"""

import json

from agentrl_shared.rollout import Row

from .rehearsal import RehearsalCollector


def gold_texts(task: dict) -> tuple[list[str], list[str]]:
    """(caller completions, rehearsal completions) of the task's reference conversation, in episode order.

    Caller: the Qwen3 tool-call block(s) of each assistant tool-call message (newline-delimited, as
    `parsing.parse_tool_calls` requires), then the reference reply. Rehearsal: each tool response in an
    `<execution_result>` block (`parsing.parse_execution_result`)."""
    caller, rehearsal = [], []
    for m in task["reference_messages"]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            blocks = [json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]})
                      for c in m["tool_calls"]]  # fmt: skip
            caller.append("".join(f"\n<tool_call>\n{b}\n</tool_call>" for b in blocks))
        elif m["role"] == "assistant":
            caller.append(m["content"])
        elif m["role"] == "tool":
            content = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            rehearsal.append(f"\n<execution_result>\n{content}\n</execution_result>")
    return caller, rehearsal


def _scripted(texts: list[str], tok, eos_id: int):
    queue = list(texts)

    def generate(prompt_ids: list[list[int]]):
        if len(queue) < len(prompt_ids):
            raise RuntimeError("the gold episode asked for more generations than the reference conversation has")
        return [tok(queue.pop(0), add_special_tokens=False).input_ids + [eos_id] for _ in prompt_ids], None

    return generate


def gold_rows(tasks: list[dict], collector: RehearsalCollector, rehearsal_rows: bool = True) -> list[Row]:
    """The rows of one gold episode per task, played by `collector` (tool_return_mode `agent`: the rehearsal role's
    prompts are built; judged): caller rows, plus rehearsal rows when `rehearsal_rows`. Raises if a gold episode does
    not reach reward 1 (the gold completions must pass their own checklist)."""
    if collector.mode != "agent":
        raise ValueError(
            "gold_rows needs a collector with tool_return_mode='agent' (it builds the rehearsal prompts)."
        )
    eos_id = collector.end_of_turn_id
    rows = []
    for task in tasks:
        caller, rehearsal = gold_texts(task)
        [traj] = collector.collect([task], [0], _scripted(caller, collector.tok, eos_id),
                                   _scripted(rehearsal, collector.tok, eos_id))  # fmt: skip
        if not traj.success:
            raise RuntimeError(f"gold episode of task {task['task_id']} ended {traj.stop_reason} with reward "
                               f"{traj.reward}: the gold completions do not pass the checklist")  # fmt: skip
        rows += [r for r in traj.rows if rehearsal_rows or r.role == "caller"]
    return rows
