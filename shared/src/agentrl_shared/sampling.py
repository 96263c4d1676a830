"""Start-up checks on the rollout sampling settings a trainer hands to TRL.

`check_is_sampling`: vLLM's importance-sampling correction with truncated sampling is refused. With `top_p < 1`,
`top_k > 0` or `min_p > 0`, vLLM's processed log-probs are renormalised over the kept mass, so pi_vllm on every
sampled token is inflated against the trainer's untruncated pi_old and the ratio pi_old / pi_vllm that TRL 1.16
multiplies into the loss (`GRPOTrainer._compute_loss`, `importance_sampling_ratio`) is biased on every token
(huggingface/trl#6789). The verl recipes these packages follow sample untruncated (e.g. VisionOPD/Vision-OPD@c2e345f
`verl/trainer/config/rollout/rollout.yaml`: `top_k: -1`, `top_p: 1`).
"""

from .config import ConfigError


def check_is_sampling(args) -> None:
    """Raise `ConfigError` (one line: what is set and the fix) when `args` (a `trl.GRPOConfig`) asks for vLLM
    rollouts with importance-sampling correction and truncated sampling; call before any model loads."""
    if not (args.use_vllm and args.vllm_importance_sampling_correction):
        return
    truncating = [
        f"{name}={value}"
        for name, value, on in (
            ("top_p", args.top_p, args.top_p < 1),
            ("top_k", args.top_k, args.top_k > 0),
            ("min_p", args.min_p, args.min_p is not None and args.min_p > 0),
        )
        if on
    ]
    if truncating:
        raise ConfigError(
            f"Truncated sampling ({', '.join(truncating)}) biases vLLM's importance-sampling correction (the "
            "log-probs are renormalised over the kept mass): sample untruncated (top_p=1.0, top_k=0, min_p unset) "
            "or set vllm_importance_sampling_correction=false."
        )
