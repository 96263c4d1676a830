"""`check_is_sampling`: truncated sampling is refused only together with vLLM's importance-sampling correction."""

import pytest
from trl import GRPOConfig

from agentrl_shared.config import ConfigError
from agentrl_shared.sampling import check_is_sampling


def _args(**kwargs) -> GRPOConfig:
    args = GRPOConfig(output_dir="/tmp/sampling-check", use_cpu=True, report_to="none")
    args.use_vllm = True  # set after __post_init__: the check reads the fields only, no vLLM is started
    for key, value in kwargs.items():
        setattr(args, key, value)
    return args


@pytest.mark.parametrize(
    "setting, named", [({"top_k": 20}, "top_k=20"), ({"top_p": 0.95}, "top_p=0.95"), ({"min_p": 0.05}, "min_p=0.05")]
)
def test_truncated_sampling_with_is_correction_is_refused(setting, named):
    with pytest.raises(ConfigError, match=f"{named}.*vllm_importance_sampling_correction=false"):
        check_is_sampling(_args(**setting))


@pytest.mark.parametrize(
    "setting",
    [
        {},  # TRL's defaults: top_p 1.0, top_k 0, min_p None
        {"min_p": 0.0, "top_k": -1},  # vLLM's "off" values
        {"top_k": 20, "vllm_importance_sampling_correction": False},
        {"top_k": 20, "use_vllm": False},  # HF generate: no vLLM log-probs, no correction
    ],
)
def test_untruncated_or_uncorrected_sampling_passes(setting):
    check_is_sampling(_args(**setting))
