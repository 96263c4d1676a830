"""`bfcl generate` with EnvACE's test-time private rehearsal in BFCL's Qwen3 FC handler (`Qwen/Qwen3-8B-FC`).

Runs INSIDE the isolated bfcl environment (`uv run --project envace/bfcl python envace/bfcl/rehearse.py generate
...`, the arguments of `bfcl generate`); `envace.bfcl.run_bfcl(..., rehearsal=...)` calls it. It registers a subclass
of bfcl-eval's `QwenFCHandler` under the same model name whose `_query_prompting` (one call per step, see
`bfcl_eval/model_handler/local_inference/base_oss_handler.py`) first asks `envace.tts_chat.PrivateRehearsal` for
the current user turn's memory and queries with it (`tts_chat.query_with_memory`). The rehearsals are sampled
through the handler's own prompt formatting (`_format_prompt`) and client (`/v1/completions` of the served policy);
the committed query is the handler's unchanged one. Settings come as JSON in `ENVACE_REHEARSAL` (budget, mode,
temperature, top_p, max_steps, max_tokens, log). `envace.tts_chat` needs only the standard library, so it is
imported from `envace/src` (envace itself is not installed here).
"""

import dataclasses
import json
import os
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bfcl_eval.__main__ import cli  # noqa: E402
from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING  # noqa: E402
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler  # noqa: E402
from overrides import override  # noqa: E402  (bfcl-eval's handlers require the marker on overrides)

from envace.tts_chat import PrivateRehearsal, query_with_memory  # noqa: E402


MODEL = "Qwen/Qwen3-8B-FC"
SETTINGS = json.loads(os.environ.get("ENVACE_REHEARSAL", "{}"))


class RehearsalQwenFCHandler(QwenFCHandler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        log = SETTINGS.get("log")
        self.rehearsal = PrivateRehearsal(self._sample, SETTINGS["budget"], SETTINGS["mode"], SETTINGS["max_steps"],
                                          Path(log) if log else None)  # fmt: skip

    def _sample(self, messages: list[dict], tools: list[dict]) -> str:
        response = self.client.completions.create(
            model=self.model_path_or_id, prompt=self._format_prompt(messages, tools), max_tokens=SETTINGS["max_tokens"],
            temperature=SETTINGS["temperature"], top_p=SETTINGS["top_p"], timeout=72000,
        )  # fmt: skip
        return response.choices[0].text

    @override
    def _query_prompting(self, inference_data: dict):
        return query_with_memory(self.rehearsal, inference_data, super()._query_prompting)


if __name__ == "__main__":
    config = MODEL_CONFIG_MAPPING[MODEL]
    MODEL_CONFIG_MAPPING[MODEL] = dataclasses.replace(config, model_handler=RehearsalQwenFCHandler)
    cli()
