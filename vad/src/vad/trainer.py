"""VADTrainer: on-policy distillation with visual-evidence attribution on TRL 1.16's GRPOTrainer VLM path.

Paper arXiv 2607.28590, Sec. 3 (method) and Sec. 4.1 (implementation). The student's
rollouts come from TRL's own single-turn VLM generation on the full image x0; a frozen copy of the initial model
scores the same completions once with the evidence crop x+ and once with the degraded view x- (Eqs. 2-10).
"""

import contextlib
import os

import torch
from accelerate.utils import is_peft_model
from safetensors.torch import load_file, save_file
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.data_utils import apply_chat_template, prepare_multimodal_messages
from trl.models import prepare_deepspeed
from trl.trainer.utils import create_model_from_path, get_config_model_id

from agentrl_shared.cadence import SignalStop
from agentrl_shared.generation import matched_vllm_engine, sync_vllm_weights
from agentrl_shared.lora import adapters_disabled
from agentrl_shared.sampling import check_is_sampling

from . import losses
from .benchmarks import rule_correct
from .config import VADConfig


TEACHER_EMA_FILE = "teacher_ema.safetensors"  # the EMA teacher's parameters in each checkpoint (`teacher_ema` set)


def answer_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """Accuracy of each rollout by the evaluation's multiple-choice rule (first option letter, or equal answers).

    Logged as the training accuracy; only the GRPO baseline (`target="grpo"`) optimises it (UNCERTAIN: the paper's
    GRPO reward is not specified; the distillation targets ignore rewards).
    """
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [float(rule_correct("train", t, a, multiple_choice=True)) for t, a in zip(texts, answer, strict=True)]


def collapse_image_tokens(ids: list[int], image_token_id: int) -> list[int]:
    """`ids` with each run of `image_token_id` cut to one token: the prompt as vLLM expects it next to the raw image
    (one placeholder per image, which vLLM expands to the image's feature count itself)."""
    return [t for i, t in enumerate(ids) if t != image_token_id or i == 0 or ids[i - 1] != image_token_id]


class TeacherEMACallback(TrainerCallback):
    """Calls [`VADTrainer.update_teacher`] after every optimizer step (`teacher_ema` set)."""

    def __init__(self, trainer: "VADTrainer"):
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer.update_teacher()


class VADTrainer(GRPOTrainer):
    """VAD: Attributing Visual Evidence for Target Reconstruction in Multimodal On-Policy Distillation.

    At each student-generated prefix a frozen teacher (the initial model) is scored with the visual evidence present
    (x+, an evidence crop) and removed (x-, the region pixelated). The centred log-prob change u is the evidence
    direction; the teacher's correction r is projected onto u, and only the aligned part, rebuilt branch-aware within
    a budget, shifts a student-anchored target trained with JSD on the student's top-K (+ tail) support; the full
    teacher is a weak regulariser. Paper: https://huggingface.co/papers/2607.28590

    Single-turn and multimodal: it keeps TRL's own generation (`num_generations` rollouts per prompt on x0).
    Dataset rows carry `prompt` (conversational), `image` (x0), `image_plus` (x+) and `image_minus` (x-).

    Overrides of [`~trl.GRPOTrainer`]:
    - `__init__`: TRL's colocated vLLM engine in the trainer's dtype (`agentrl_shared.generation.matched_vllm_engine`);
      builds the frozen teacher from the model path (a deep copy would clone empty ZeRO-3 shards) and wraps
      it with `trl.models.prepare_deepspeed` under DeepSpeed; the reward function defaults to a constant (unused);
      with `teacher_ema` (the `vision_opd` row) a callback moves the teacher toward the student after each step.
    - `_save_checkpoint` / `_load_optimizer_and_scheduler`: with `teacher_ema`, each checkpoint also holds the EMA
      teacher (`teacher_ema.safetensors`), and resuming restores it.
    - `_generate_single_turn`: TRL's, with the shared vLLM weight sync (`agentrl_shared.generation.sync_vllm_weights`).
    - `_generate_and_score_completions`: calls super, then renders the same messages with x+ and x- through the
      processor and attaches per-view `teacher_{pos,neg}_*` keys (prompt ids/mask, per-row pixel lists, grids).
    - `_compute_loss`: one student forward on x0 and two no-grad teacher forwards (x+, x-) over the same completion,
      aligned on completion positions; `losses.vad_token_losses` (Eqs. 2-10); token-mean over the generation batch.
      With `target="direct"` only the x+ forward runs (plain on-policy distillation); `target="grpo"` is TRL's loss.
    Everything else (generation, sampling, shuffling, logging, the rest of the checkpoints) is inherited unchanged.
    """

    _tag_names = ["trl", "vad", "distillation", "vlm"]
    _name = "VAD"
    _paper = {
        "title": "Attributing Visual Evidence for Target Reconstruction in Multimodal On-Policy Distillation",
        "id": "2607.28590",
        # docstyle-ignore
        "citation": """\
@article{zhang2026vad,
    title        = {{Attributing Visual Evidence for Target Reconstruction in Multimodal On-Policy Distillation}},
    author       = {Kangning Zhang and Yixing Li and Shuai Shao and Qingyao Li and Zhengxi Lu and Zhiyuan Yao and Jianghao Lin and Wenxiang Jiao and Yuan Lu and Weiwen Liu and Weinan Zhang and Yong Yu},
    year         = 2026,
    eprint       = {arXiv:2607.28590}
}""",
    }

    def __init__(self, model, reward_funcs=None, args: VADConfig | None = None, **kwargs):
        if args is None:
            args = VADConfig("vad-output")
        check_is_sampling(args)  # before any model loads
        if kwargs.get("peft_config") is not None and args.teacher_ema is not None:
            raise ValueError(
                f"teacher_ema={args.teacher_ema} (the vision_opd row) with LoRA is not supported: the teacher is the "
                "policy with its adapters disabled, and an EMA of the low-rank factors A and B is not an EMA of the "
                "weights (B A is not linear in them); train that row without model.lora."
            )
        # the colocated vLLM engine in the trainer's dtype (TRL passes none; `generation.vllm_engine_kwargs`)
        colocated = args.use_vllm and args.vllm_mode == "colocate"
        with matched_vllm_engine(self) if colocated else contextlib.nullcontext():
            super().__init__(model, reward_funcs if reward_funcs is not None else [answer_reward], args=args, **kwargs)
        self.teacher_model = None
        if args.target != "grpo":
            self._setup_teacher()
        if args.teacher_ema is not None:
            self.add_callback(TeacherEMACallback(self))
        self.add_callback(SignalStop(self))  # SIGTERM/SIGINT: this step saved (with the EMA teacher), then stop

    def _setup_teacher(self) -> None:
        """pi_theta_bar: a frozen copy of the initial student (Sec. 3.1), rebuilt from its path like TRL's ref model.
        With LoRA the initial student is the policy with its adapters disabled (TRL's reference with PEFT), so no copy
        is built and `teacher_model` stays None (`_teacher`)."""
        if is_peft_model(self.accelerator.unwrap_model(self.model)):
            return
        model_init_kwargs = dict(self.args.model_init_kwargs or {})
        if self.args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]:
            model_init_kwargs["device_map"] = None
        model_init_kwargs.setdefault("dtype", self.model.dtype)
        model_init_kwargs.setdefault("attn_implementation", self.model.config._attn_implementation)
        teacher = create_model_from_path(get_config_model_id(self.model.config), **model_init_kwargs)
        teacher.requires_grad_(False)
        teacher.eval()
        if self.is_deepspeed_enabled:  # ZeRO-3: shard the frozen teacher with the trainer's DeepSpeed config
            self.teacher_model = prepare_deepspeed(teacher, self.accelerator)
        else:
            self.teacher_model = self.accelerator.prepare_model(teacher, evaluation_mode=True)

    def _teacher(self, model):
        """The frozen teacher's module for a no-grad forward, and the context it runs in: the copy built by
        `_setup_teacher`, or with LoRA `model` itself with its adapters disabled (the initial model)."""
        if self.teacher_model is not None:
            return self.teacher_model, contextlib.nullcontext()
        return model, adapters_disabled(model)

    def _teacher_parameters(self) -> tuple[list[tuple[str, torch.nn.Parameter]], bool]:
        """The teacher's named parameters, and whether ZeRO-3 partitions them (each must then be gathered)."""
        teacher = self.accelerator.unwrap_model(self.teacher_model)
        zero3 = self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        return list(teacher.named_parameters()), zero3

    @staticmethod
    def _gathered(zero3: bool, params: list, modifier_rank: int | None = None):
        """Under ZeRO-3, `params` gathered whole on every rank (written back from `modifier_rank`); else nothing."""
        if not zero3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(params, modifier_rank=modifier_rank)

    def update_teacher(self) -> None:
        """Vision-OPD's EMA teacher (`teacher_ema`): theta_T <- (1 - rate) theta_T + rate theta_S, parameter by
        parameter after each optimizer step (VisionOPD/Vision-OPD @ c2e345f `verl/workers/actor/dp_actor.py`
        `_update_teacher`, on the FSDP shards). Under ZeRO-3 each pair is gathered, rank 0 updates the teacher's full
        tensor and DeepSpeed re-partitions it to every rank; otherwise every rank updates its full copy."""
        rate = self.args.teacher_ema
        teacher, zero3 = self._teacher_parameters()
        student = self.accelerator.unwrap_model(self.model).parameters()
        with torch.no_grad():
            for (_, t), s in zip(teacher, student, strict=True):
                with self._gathered(zero3, [s]), self._gathered(zero3, [t], modifier_rank=0):
                    if not zero3 or self.accelerator.is_main_process:
                        t.mul_(1.0 - rate).add_(s.to(t.device, t.dtype), alpha=rate)

    # --------------------------------------------------------------------------- EMA teacher in checkpoints

    def _save_checkpoint(self, model, trial):
        # --- VAD change: with `teacher_ema` the teacher is training state, so each checkpoint holds its parameters
        # (Vision-OPD's checkpoints hold the actor only, VisionOPD/Vision-OPD @ c2e345f `verl/workers/fsdp_workers.py`
        # `save_checkpoint`, so a resumed official run restarts its teacher); written before TRL's files, so any
        # checkpoint with a trainer state has its teacher (TRL 1.16 GRPOTrainer adds its adaptive-entropy state here) ---
        if self.args.teacher_ema is not None:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            self.save_teacher(os.path.join(self._get_output_dir(trial=trial), folder))
        super()._save_checkpoint(model, trial)

    def _load_optimizer_and_scheduler(self, checkpoint):
        # --- VAD change: resuming restores the EMA teacher with the optimizer (both after the models are prepared,
        # DeepSpeed or not; TRL 1.16 GRPOTrainer restores its adaptive-entropy state here too) ---
        super()._load_optimizer_and_scheduler(checkpoint)
        if self.args.teacher_ema is not None and checkpoint is not None:
            self.load_teacher(checkpoint)

    def save_teacher(self, folder: str) -> None:
        """The teacher's full parameters (gathered one by one under ZeRO-3) to `folder/teacher_ema.safetensors`."""
        params, zero3 = self._teacher_parameters()
        state = {}
        for name, p in params:
            with self._gathered(zero3, [p]):
                if self.args.should_save:
                    state[name] = p.detach().cpu().clone()
        if self.args.should_save:
            os.makedirs(folder, exist_ok=True)
            save_file(state, os.path.join(folder, TEACHER_EMA_FILE))

    def load_teacher(self, checkpoint: str) -> None:
        """The teacher's parameters from `checkpoint/teacher_ema.safetensors` (under ZeRO-3 rank 0 writes each full
        tensor and DeepSpeed re-partitions it); a checkpoint without one is refused, as the teacher would otherwise
        silently restart from the initial model."""
        path = os.path.join(checkpoint, TEACHER_EMA_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{checkpoint} has no {TEACHER_EMA_FILE} (the EMA teacher of teacher_ema={self.args.teacher_ema}): "
                "it was saved without it; delete the run's trainer folder to rerun the row from the start."
            )
        params, zero3 = self._teacher_parameters()
        state = load_file(path)
        if set(state) != {name for name, _ in params}:
            raise ValueError(f"{path} holds other parameters than the teacher {type(self.teacher_model).__name__}.")
        with torch.no_grad():
            for name, t in params:
                with self._gathered(zero3, [t], modifier_rank=0):
                    if not zero3 or self.accelerator.is_main_process:
                        t.copy_(state[name].to(t.device, t.dtype))

    # ------------------------------------------------------------------------------------------ teacher views

    def _view_inputs(self, inputs: list[dict], column: str, prefix: str) -> dict:
        """Render each row's messages with the image in `column` (x+ or x-) and process them (one image per row).

        Pixel rows differ per image, so they travel as a list of B tensors (TRL's `shuffle_sequence_dict` and
        `split_tensor_dict` keep lists row-aligned); ids and masks are (B, P_view) tensors, left-padded.
        """
        prompts = [prepare_multimodal_messages(x["prompt"], images=[x[column]]) for x in inputs]
        texts = [
            apply_chat_template({"prompt": p}, self.processing_class, **self.chat_template_kwargs)["prompt"]
            for p in prompts
        ]
        enc = self.processing_class(
            images=[[x[column]] for x in inputs], text=texts, padding=True, return_tensors="pt"
        )
        device = self.accelerator.device
        grid = enc["image_grid_thw"].to(device)  # (B, 3): one image per row
        pixel_rows = torch.split(enc["pixel_values"].to(device), grid.prod(dim=-1).tolist())  # B x (patches, D)
        return {
            f"{prefix}prompt_ids": enc["input_ids"].to(device),  # (B, P_view)
            f"{prefix}prompt_mask": enc["attention_mask"].to(device),
            f"{prefix}mm_token_type_ids": enc["mm_token_type_ids"].to(device),
            f"{prefix}image_grid_thw": grid,
            f"{prefix}pixel_values": list(pixel_rows),
        }

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's, with two changes on the vLLM path.

        - The weight sync of `agentrl_shared.generation.sync_vllm_weights` (the multi-turn trainers' too): TRL's own
          `sync_weights`, except on vLLM's CPU build, whose repacked linear layers TRL's per-parameter load cannot
          write (it fails on the vision tower's first layer); then the engine's cached image embeddings are dropped.
        - In colocate mode the engine gets each prompt with one image token per image (`collapse_image_tokens`).
          TRL 1.16 passes the processor's token ids, whose image tokens are already expanded to one per merged patch,
          together with the raw images (`trl/generation/vllm_generation.py`, `VLLMGeneration.generate`), and vLLM
          0.31 expands the first image token of each image again (`vllm/multimodal/processing/processor.py`,
          `_apply_prompt_updates`): the engine then samples from a longer prompt than the one the trainer scores
          (huggingface/trl#6294, fix open in huggingface/trl#6718). The trainer keeps the expanded ids (the caller's
          `prompt_ids`); TRL's server mode places the image features on the expanded runs itself, so it is unchanged.
        """
        if self.use_vllm and self.state.global_step != self._last_loaded_step:
            sync_vllm_weights(self.vllm_generation)
            self._last_loaded_step = self.state.global_step  # TRL's own check below then finds nothing to sync
        if self.use_vllm and self.vllm_mode == "colocate" and images is not None:
            image_token_id = self.processing_class.image_token_id
            prompt_ids = [collapse_image_tokens(ids, image_token_id) for ids in prompt_ids]
        return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        output = super()._generate_and_score_completions(inputs)
        # --- VAD change (Sec. 3.1): teacher prompts for x+ and x-, rows aligned with the student's rollouts ---
        if self.args.target != "grpo":
            output.update(self._view_inputs(inputs, "image_plus", "teacher_pos_"))
        if self.args.target not in ("grpo", "direct"):
            output.update(self._view_inputs(inputs, "image_minus", "teacher_neg_"))
        return output

    # -------------------------------------------------------------------------------------------------- loss

    def _completion_logits(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, view: dict):
        """Plain forward (TRL's fused LM head returns only sampled-token log-probs; VAD needs top-K) -> raw logits at
        the completion positions, in the model's dtype (the fp32 softmax is taken chunk by chunk later).

        Each view has its own prompt length and image tokens, so alignment is on completion positions only: the
        last C logits before the end predict the C completion tokens. Returns (B, C, V).
        """
        c = completion_ids.size(1)
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P + C)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mm = view["mm_token_type_ids"]
        if mm.size(1) == prompt_ids.size(1):  # teacher views: extend the prompt's token types over the completion
            mm = torch.cat([mm, mm.new_zeros(completion_ids.shape)], dim=1)
        with self.accelerator.autocast():
            logits = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                pixel_values=view["pixel_values"],
                image_grid_thw=view["image_grid_thw"],
                mm_token_type_ids=mm,
                use_cache=False,
                logits_to_keep=c + 1,  # only the completion positions reach the (large-vocabulary) LM head
            ).logits
        return logits[:, :-1, :]  # (B, C, V)

    def _teacher_view(self, inputs: dict, prefix: str) -> dict:
        return {
            "pixel_values": torch.cat(inputs[f"{prefix}pixel_values"], dim=0),
            "image_grid_thw": inputs[f"{prefix}image_grid_thw"],
            "mm_token_type_ids": inputs[f"{prefix}mm_token_type_ids"],
        }

    def _compute_loss(self, model, inputs):
        args = self.args
        if args.target == "grpo":  # baseline (Tab. 1): TRL's GRPO loss on the reward
            return super()._compute_loss(model, inputs)
        mode = "train" if self.model.training else "eval"
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]  # (B, C)

        # Student p_S^0 on x0, with gradient (Sec. 3.2)
        student_view = {k: inputs[k] for k in ("pixel_values", "image_grid_thw", "mm_token_type_ids")}
        student_logits = self._completion_logits(
            model, inputs["prompt_ids"], inputs["prompt_mask"], completion_ids, completion_mask, student_view
        )  # (B, C, V)
        chunk = {"temperature": self.temperature, "chunk_size": args.logit_chunk_size}
        student_logp, top_idx = losses.chunked_support_logps(student_logits, k=args.support_k, **chunk)  # (B, C, K)

        # Teacher p_T^+ (x+) and p_T^- (x-): frozen, no grad, same completion; every rank runs the same forwards
        # (under ZeRO-3 a rank that skipped a forward would hang the others' parameter all-gathers)
        teacher, teacher_context = self._teacher(model)
        with torch.no_grad(), teacher_context:
            pos_logits = self._completion_logits(
                teacher,
                inputs["teacher_pos_prompt_ids"],
                inputs["teacher_pos_prompt_mask"],
                completion_ids,
                completion_mask,
                self._teacher_view(inputs, "teacher_pos_"),
            )
            pos_logp, _ = losses.chunked_support_logps(pos_logits, top_idx, **chunk)  # (B, C, K)
            del pos_logits
            neg_logp = None
            if args.target != "direct":
                neg_logits = self._completion_logits(
                    teacher,
                    inputs["teacher_neg_prompt_ids"],
                    inputs["teacher_neg_prompt_mask"],
                    completion_ids,
                    completion_mask,
                    self._teacher_view(inputs, "teacher_neg_"),
                )
                neg_logp, _ = losses.chunked_support_logps(neg_logits, top_idx, **chunk)
                del neg_logits

        # float64 on the (B, C, K) support: cheap, and keeps near-zero JSDs non-negative
        terms = losses.vad_token_losses(
            student_logp.double(),
            pos_logp.double(),
            None if neg_logp is None else neg_logp.double(),
            target=args.target,
            divergence_kind=args.divergence,
            zeta=args.zeta,
            tau_plus=args.tau_plus,
            target_clip=args.target_clip,
            eps=args.eps,
            log_eps=args.log_eps,
            tail_bucket=args.tail_bucket,
            q_tail=args.q_tail,
            branch_weights=args.branch_weights,
            scalar_scale=args.scalar_scale,
        )
        # L = L_vis + lambda * a_t * L_reg per position (Eq. 10)
        per_token_loss = (terms["vis"] + args.reg_weight * terms["reg_weight"] * terms["reg"]).float()  # (B, C)

        # Vision-OPD's clipped IS weight (`is_clip`, VisionOPD/Vision-OPD @ c2e345f `scripts/run_vision_opd.sh`):
        # only when TRL kept old log-probs (off-policy micro-steps, or vLLM rollouts)
        old_logps = inputs.get("old_per_token_logps")
        if args.is_clip is not None and old_logps is not None:
            with torch.no_grad():
                sampled, _ = losses.chunked_support_logps(student_logits, completion_ids.unsqueeze(-1), **chunk)
            ratio = torch.exp((sampled.squeeze(-1) - old_logps).clamp(-20.0, 20.0)).clamp(max=args.is_clip)
            per_token_loss = per_token_loss * ratio
        # vLLM rollout correction, applied as TRL 1.16 `GRPOTrainer._compute_loss` does: the truncated (or masked)
        # ratio pi_old / pi_vllm that `_generate_and_score_completions` computed multiplies the per-token loss
        # (Vision-OPD: `algorithm.rollout_correction.rollout_is=token`, threshold 2.0)
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]

        # Token mean per optimizer step, TRL's `dapo` normaliser (with its steps_per_generation factor); scaled for GA
        normalizer = losses.token_mean_normalizer(
            inputs["num_items_in_batch"], self.accelerator.num_processes, self.current_gradient_accumulation_steps,
            args.steps_per_generation, training=mode == "train",
        )  # fmt: skip
        loss = (per_token_loss * mask).sum() / normalizer

        def global_masked_mean(x: torch.Tensor) -> float:
            totals = self.accelerator.reduce(torch.stack([(x.float() * mask).sum(), mask.sum().float()]), "sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        self._metrics[mode]["vad/vis_loss"].append(global_masked_mean(terms["vis"]))
        self._metrics[mode]["vad/reg_loss"].append(global_masked_mean(terms["reg"]))
        self._metrics[mode]["vad/reg_weight"].append(global_masked_mean(terms["reg_weight"]))
        self._metrics[mode]["vad/beta"].append(global_masked_mean(terms["beta"]))
        self._metrics[mode]["vad/rho"].append(global_masked_mean(terms["rho"]))
        self._metrics[mode]["vad/misaligned_frac"].append(global_masked_mean(terms["misaligned"]))
        return loss
