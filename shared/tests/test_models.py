"""Offline builders: the exact Qwen tokenizer (ids, specials, tool parsing) and the tiny Qwen3; SmolLM2 is slow."""

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_shared.models import model_path, qwen_tokenizer, smollm2_135m, tiny_qwen3


def test_qwen_tokenizer_matches_qwen():
    tok = qwen_tokenizer()
    assert len(tok) == 151669
    assert tok("Hello, world!").input_ids == [9707, 11, 1879, 0]
    ids = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"])
    assert ids == [151643, 151644, 151645, 151667, 151668]
    text = "def f(x):\n    return x ** 2  # 平方\n\n"
    assert tok.decode(tok(text).input_ids) == text
    parsed = tok.parse_response(
        '<tool_call>\n{"name": "act", "arguments": {"a": 1}}\n</tool_call><|im_end|>', prefix=""
    )
    assert parsed["tool_calls"][0]["function"] == {"name": "act", "arguments": {"a": 1}}


def test_tiny_qwen3_builds_once_and_loads():
    path = tiny_qwen3()
    assert tiny_qwen3() == path and model_path("tiny-qwen3") == str(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.vocab_size == len(tok) and model.generation_config.eos_token_id == tok.eos_token_id


@pytest.mark.slow
def test_smollm2_answers_like_smollm2():
    path = smollm2_135m()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)  # fmt: skip
    out = model.generate(**tok(prompt, return_tensors="pt"), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0])


def test_model_path_finds_hub_models_in_the_local_cache_only(tmp_path, monkeypatch):
    from agentrl_shared.config import ConfigError

    snapshot = tmp_path / "models--org--m" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--org--m" / "refs").mkdir()
    (tmp_path / "models--org--m" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert model_path("org/m") == str(snapshot)
    assert model_path(str(snapshot)) == str(snapshot)
    with pytest.raises(ConfigError, match="hf download org/missing"):
        model_path("org/missing")


def test_git_commit_stamps_a_checkout_and_says_unknown_outside(tmp_path):
    from agentrl_shared.provenance import git_commit

    assert git_commit(tmp_path) == "unknown"
    stamp = git_commit()
    assert stamp == "unknown" or len(stamp.split("+")[0]) >= 7


def test_git_commit_is_the_commit_the_process_loaded(tmp_path):
    """A results file names the commit its process started from, even when the checkout moves on during the run."""
    import shutil
    import subprocess
    import sys

    from agentrl_shared import provenance

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copy(provenance.__file__, tmp_path / "provenance.py")
    subprocess.run([*git, "add", "provenance.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "a"], check=True)
    script = (
        "import importlib.util, subprocess, sys\n"
        f"spec = importlib.util.spec_from_file_location('p', {str(tmp_path / 'provenance.py')!r})\n"
        "p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n"
        f"open({str(tmp_path / 'later.txt')!r}, 'w').write('x')\n"
        f"subprocess.run({[*git, 'add', 'later.txt']!r}, check=True)\n"
        f"subprocess.run({[*git, 'commit', '-q', '-m', 'b']!r}, check=True)\n"
        f"print(p.git_commit(), p.read_commit({str(tmp_path)!r}))\n"
    )
    started, now = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    log = subprocess.run([*git, "log", "--format=%h"], capture_output=True, text=True, check=True).stdout.split()
    assert (started, now) == (log[1], log[0])
