"""What the policy sees over real multi-turn episodes: the rollout collector renders every turn's prompt from the
environment's own steps (no hand-built history), and each test checks it against the structure of verl-agent's
templates (ZJU-REAL/SDAR@8b85c23 `agent_system/environments/prompts/*.py`, `env_manager.py`, `memory/memory.py`).
"""

import os
import re
from pathlib import Path

import pytest

from agentrl_shared.envs import load_tasks
from agentrl_shared.envs.pool import EnvPool
from agentrl_shared.models import qwen_tokenizer
from agentrl_shared.prompts import make_prompt
from agentrl_shared.rollout import RolloutCollector


REPO_ROOT = Path(__file__).resolve().parents[3]
DATA = Path(os.environ.get("AGENTRL_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


class Recorder:
    """A scripted policy: `reply(prompt_text, turn)` gives the completion; every prompt is kept, per turn."""

    def __init__(self, tok, reply):
        self.tok, self.reply, self.prompts = tok, reply, []

    def __call__(self, prompt_ids):
        texts = [self.tok.decode(p) for p in prompt_ids]
        self.prompts.append(texts)
        return [
            self.tok(self.reply(t, len(self.prompts) - 1) + "<|im_end|>", add_special_tokens=False).input_ids
            for t in texts
        ], None


def user_text(prompt: str) -> str:
    return prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


# ------------------------------------------------------------------------------------------------ ALFWorld


def _alfworld_task(tmp_path_factory, real: bool) -> dict:
    pytest.importorskip("alfworld")
    from agentrl_shared.envs import alfworld as A
    from agentrl_shared.testing import write_synthetic_games

    if real:
        if not (DATA / "alfworld" / "json_2.1.1" / "valid_seen").is_dir():
            pytest.skip(f"no ALFWorld data at {DATA / 'alfworld'}")
        return A.load_tasks("valid_seen", DATA / "alfworld")[0]
    root = tmp_path_factory.mktemp("alfworld")
    write_synthetic_games(root, "train", n_games=1)
    return A.load_tasks("train", root)[0]


@pytest.mark.parametrize("real", [pytest.param(True, marks=pytest.mark.realdata), False], ids=["real", "synthetic"])
def test_alfworld_task_sentence_in_every_prompt(tok, tmp_path_factory, real):
    """Bug 1 of issue 9: the task must be in every prompt after the first (verl-agent extracts it from the first
    observation); 5 turns of a real game, each prompt checked section by section."""
    from agentrl_shared.envs import make_env

    task = _alfworld_task(tmp_path_factory, real)
    script = ["look", "inventory", "go to nowhere", "look", "inventory"]
    policy = Recorder(tok, lambda _, turn: f"<think>step {turn}</think><action>{script[turn]}</action>")
    with EnvPool(lambda: make_env("alfworld", expert_type="none"), num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("alfworld"), tok, max_turns=5, max_prompt_length=8192)
        (ep,) = collector.collect([task], [0], [0], policy)
    assert len(ep.rows) == 5 and not ep.failed
    first = user_text(policy.prompts[0][0])
    sentence = re.search(r"Your task is to: (.+)", first).group(1).strip()  # from the game's first observation
    assert sentence and "Your task is to:" not in first.split("Your current observation is:")[0]
    for turn, prompts in enumerate(policy.prompts[1:], start=1):
        text = user_text(prompts[0])
        head, rest = text.split("\n", 2)[1:]  # leading blank line, then the head line with the task
        assert head.endswith(f"Your task is to: {sentence}"), (turn, head)
        assert f"Before this step you have taken {turn} step(s)." in rest
        shown = re.findall(r"\[Observation (\d+): '.*?', Action \1: '(.*?)'\]", rest, re.S)
        assert [int(k) for k, _ in shown] == list(range(max(1, turn - 1), turn + 1))  # the last 2 turns
        assert [a for _, a in shown] == script[max(0, turn - 2) : turn]
        assert f"You are now at step {turn + 1} and your current observation is: " in rest
        admissible = rest.split("Your admissible actions in the current situation are: [", 1)[1].split("].\n\n")[0]
        items = admissible.split("\n ")
        assert all(i.startswith("'") and i.endswith("'") for i in items) and "'help'" not in items
        assert "'look'" in items and "'inventory'" in items
        assert rest.endswith("<action> </action> tags.\n")


# ------------------------------------------------------------------------------------------------ Search-QA


@pytest.fixture(scope="module")
def qa_dir(tmp_path_factory):
    from agentrl_shared.testing import write_synthetic_qa

    return write_synthetic_qa(tmp_path_factory.mktemp("search_qa"))


def test_search_each_result_right_after_its_search(tok, qa_dir):
    """Bug 2 of issue 9: two searches, then an answer; each search's passages follow that search in the history
    (`Step k:<search>q</search> <information>...</information>`), and the question heads every prompt."""
    from agentrl_shared.envs import make_env

    tasks = load_tasks("search_qa", "test", data_dir=qa_dir)
    task = next(t for t in tasks if "largest planet" in t["question"])
    queries = ["capital of france", "largest planet"]
    replies = [f"<think>t</think><search>{q}</search>" for q in queries] + ["<think>t</think><answer>Jupiter</answer>"]
    policy = Recorder(tok, lambda _, turn: replies[turn])
    factory = lambda: make_env("search_qa", corpus_path=qa_dir / "corpus.jsonl", service="local")  # noqa: E731
    with EnvPool(factory, num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("search"), tok, max_turns=4, max_prompt_length=8192)
        (ep,) = collector.collect([task], [0], [0], policy)
    assert ep.won and len(ep.rows) == 3
    first, second, third = (user_text(p[0]) for p in policy.prompts)
    for text in (first, second, third):
        assert f"\nYour question: {task['question']}\n\n" in text
    assert "Step " not in first and "<information>" not in first
    steps = re.findall(r"Step (\d+):(<search>.*?</search>) (<information>.*?</information>)\n", third, re.S)
    assert [(int(k), s) for k, s, _ in steps] == [
        (1, "<search>capital of france</search>"),
        (2, "<search>largest planet</search>"),
    ]
    assert "Paris is the capital" in steps[0][2] and "Jupiter" not in steps[0][2].split("Doc 2")[0]
    assert "Jupiter is the fifth planet" in steps[1][2].split("Doc 2")[0]
    assert "Before this step you have taken 2 step(s)." in third
    assert re.findall(r"Step (\d+):", second) == ["1"] and "Paris is the capital" in second
    assert "Jupiter is the fifth planet" not in second  # search 2's result is not shown before search 2


# ------------------------------------------------------------------------------------------------ WebShop


def test_webshop_episode_prompt_structure(tok, tmp_path_factory):
    """A 3-turn WebShop episode (search, open a product, pick an option): every prompt has verl-agent's sections,
    observations through `format_obs`, and the available actions quoted with a comma between `[` and `]` lines."""
    from agentrl_shared.envs import make_env
    from agentrl_shared.testing import write_synthetic_catalog

    data = write_synthetic_catalog(tmp_path_factory.mktemp("webshop"))
    task = load_tasks("webshop", "all", data_dir=data)[0]
    replies = ["search[running shoes]", "click[b0syn00000]", "click[black]"]
    policy = Recorder(tok, lambda _, turn: f"<think>t</think><action>{replies[turn]}</action>")
    with EnvPool(lambda: make_env("webshop", data_dir=data, service="local"), num_slots=1, num_workers=0) as pool:
        collector = RolloutCollector(pool, make_prompt("webshop"), tok, max_turns=3, max_prompt_length=8192)
        (ep,) = collector.collect([task], [0], [0], policy)
    assert len(ep.rows) == 3 and not ep.failed
    texts = [user_text(p[0]) for p in policy.prompts]
    instruction = re.search(r"Your task is to: (.+)\.\n", texts[0]).group(1)
    assert "Your current observation is: 'Search'.\n" in texts[0] and "Before this step" not in texts[0]
    for turn, text in enumerate(texts):
        assert text.startswith("\nYou are an expert autonomous agent shopping in the WebShop e-commerce environment.")
        assert f"\nYour task is to: {instruction}.\n" in text
        block = text.split("Your available actions in the current situation are:\n[\n", 1)[1].split("\n].\n\n")[0]
        assert all(line.startswith("'") and line.endswith("',") for line in block.split("\n"))
        if turn:
            assert f"Before this step you have taken {turn} step(s)." in text
            assert f"Action {turn}: '{replies[turn - 1]}']" in text
            assert instruction not in text.split("You are now at step")[1]  # format_obs drops the instruction part
    assert "'Back to Search' [SEP] 'Page 1 (Total results:" in texts[1]
    assert "'click[black]'," in texts[2] and "'click[buy now]'," in texts[2]
