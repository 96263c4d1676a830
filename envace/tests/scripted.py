"""A scripted policy for the rollout and smoke tests: it reads the chat-templated prompt (Qwen3 template) and answers
as a caller (gold tool call, then the gold reply) or as the rehearsal role (the ground-truth response), with a
chosen share of garbage answers so that rewards vary."""

import json
import random
import re


def parse_chat(text: str) -> list[tuple[str, str]]:
    """(role, content) of every `<|im_start|>role\\n...<|im_end|>` block, the open last block included."""
    return [
        (m.group(1), m.group(2)) for m in re.finditer(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", text, re.DOTALL)
    ]


class ScriptedPolicy:
    """`generate(prompt_ids) -> (completion_ids, None)` over a set of generated tasks.

    Args:
        garbage (`float`): probability of a plain-text non-answer instead of the scripted one.
        wrong_rehearsal (`bool`): the rehearsal role returns a made-up value instead of the ground truth.
        parallel (`bool`): the caller issues the gold call twice in one response (parallel calls).
    """

    def __init__(self, tok, tasks, garbage=0.0, seed=0, wrong_rehearsal=False, parallel=False, caller_text=None):
        self.tok, self.rng = tok, random.Random(seed)
        self.garbage, self.wrong_rehearsal, self.parallel, self.caller_text = (
            garbage,
            wrong_rehearsal,
            parallel,
            caller_text,
        )
        self.turns = {}
        for task in tasks:
            ref = task["reference_messages"]
            for i, m in enumerate(ref):
                if m["role"] == "user":
                    fn = ref[i + 1]["tool_calls"][0]["function"]
                    self.turns[m["content"]] = (fn, ref[i + 3]["content"])
        self.calls = {"caller": 0, "simulator": 0}

    def answer(self, prompt: str) -> str:
        if self.rng.random() < self.garbage:
            return "I am not sure what to do."
        blocks = parse_chat(prompt)
        if "RL model's latest response:" in prompt:
            self.calls["simulator"] += 1
            name = re.search(r"- name: (\S+)", prompt).group(1)
            args = re.search(r"parsed from caller's tool_call\):\n(.*?)(?:\n\n/think|$)", prompt, re.DOTALL).group(1)
            # copy the ground-truth few-shot result of the same call from the prompt, as the rehearsal role should
            shots = re.findall(r"Tool name:\n(\S+)\nTool arguments:\n(.*?)\nTool execution result:\n(.*?)\n\n"
                               r"(?=Tool name:|Current conversation history:)", prompt, re.DOTALL)  # fmt: skip
            want = json.loads(args)
            resp = next((json.loads(r) for n, a, r in shots if n == name and json.loads(a) == want), None)
            if resp is None:
                resp = {"error_tool_call": {"code": "INVALID_PARAMETERS", "message": "unknown call"}}
            elif self.wrong_rehearsal:
                resp = {k: (v + 1 if isinstance(v, (int, float)) else "unknown") for k, v in resp.items()}
            return f"<think>\nsimulate\n</think>\n\n<execution_result>\n{json.dumps(resp)}\n</execution_result>"
        self.calls["caller"] += 1
        if self.caller_text is not None:
            return self.caller_text
        users = [c for r, c in blocks if r == "user" and "<tool_response>" not in c]
        if not users:  # the lock-step dummy prompt of a rank with no active episode (its output is discarded)
            return "I am not sure what to do."
        fn, reply = self.turns[users[-1].strip()]
        last_user = max(i for i, (r, c) in enumerate(blocks) if r == "user" and "<tool_response>" not in c)
        answered = any("<tool_response>" in c for _, c in blocks[last_user + 1 :])
        if answered:
            observed = [c for _, c in blocks[last_user + 1 :] if "<tool_response>" in c][-1]
            field = reply.split("The ", 1)[1].split(" is ")[0].replace(" ", "_")
            value = json.loads(observed.split("<tool_response>\n", 1)[1].split("\n</tool_response>")[0])[field]
            value = f"{value:g}" if isinstance(value, float) else str(value)
            return f"<think>\n\n</think>\n\nThe {field.replace('_', ' ')} is {value}."  # reports what it observed
        call = json.dumps({"name": fn["name"], "arguments": fn["arguments"]})
        block = f"\n<tool_call>\n{call}\n</tool_call>"
        return "<think>\ncall the tool\n</think>\n" + block * (2 if self.parallel else 1)

    def __call__(self, prompt_ids):
        out = []
        for ids in prompt_ids:
            text = self.answer(self.tok.decode(ids, skip_special_tokens=False))
            out.append(self.tok(text + "<|im_end|>", add_special_tokens=False).input_ids)
        return out, None
