"""Model back ends for the three roles (agent, user simulator, judge): OpenAI-compatible HTTP, in-process
transformers, and a scripted back end for tests and benchmarks.

Official settings: agent/user/judge LLMs at temperature 0 (`src/vita/models.yaml.example`), seed 300
(`src/vita/config.py`); the policy under test is served through an OpenAI-compatible endpoint. Every call records prompt/completion tokens and latency; each back end caps its
concurrent calls. An endpoint failure that a retry cannot fix raises [`BackendError`] with the server's message; the
runner records it for that subtask and goes on, as the official harness does (meituan-longcat/VitaBench-2.0 @
f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/utils/llm_utils.py`, `src/vita/run.py`).
"""

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field


logger = logging.getLogger(__name__)
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class BackendError(RuntimeError):
    """A model call failed for good (a 4xx reply, or retries exhausted); the message includes the server's text."""


@dataclass
class ChatResult:
    """One model reply. `tool_calls` items are `{"id", "name", "arguments"}`: the decoded JSON (an object, or whatever
    the model sent: `null`, a number), or the text itself when it is not valid JSON."""

    content: str
    tool_calls: list[dict] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks out of a text reply.

    Malformed blocks stay in the content (the orchestrator then sees a plain message).
    """
    calls = []
    for match in TOOL_CALL_RE.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:  # kept as the text: the call's observation names the malformed JSON
                    pass
            calls.append({"id": f"call_{uuid.uuid4().hex[:8]}", "name": obj["name"], "arguments": args})
            text = text.replace(match.group(0), "")
    return text.strip(), calls


def render_tools_text(tools: list[dict]) -> str:
    """Compact tool list + calling convention for models without native function calling (each tool's first
    description line; the preconditions, postconditions and argument docs go to native function calling only)."""
    lines = ["# Tools", 'To call a tool, reply with <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call>.']
    for t in tools:
        f = t["function"]
        args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in f["parameters"]["properties"].items())
        lines.append(f"- {f['name']}({args}): {f['description'].splitlines()[0]}")
    return "\n".join(lines)


def to_text_messages(messages: list[dict], tools: list[dict] | None) -> list[dict]:
    """Flatten tool calls/results into plain system/user/assistant messages (text tool-call protocol)."""
    out = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = "".join(
                "<tool_call>"
                + json.dumps({"name": c["name"], "arguments": c["arguments"]}, ensure_ascii=False)
                + "</tool_call>"
                for c in m["tool_calls"]
            )
            content = (content + "\n" + calls).strip()
        elif role == "tool":
            role, content = "user", f"[tool result of {m.get('name', 'tool')}]\n{content}"
        out.append({"role": role, "content": content})
    if tools:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + render_tools_text(tools)}
        else:
            out.insert(0, {"role": "system", "content": render_tools_text(tools)})
    # merge consecutive same-role messages (small chat templates expect alternation)
    merged: list[dict] = []
    for m in out:
        if merged and merged[-1]["role"] == m["role"] and m["role"] != "system":
            merged[-1] = {"role": m["role"], "content": merged[-1]["content"] + "\n\n" + m["content"]}
        else:
            merged.append(m)
    return merged


class ChatBackend:
    """Base class: concurrency cap and per-call usage log; subclasses implement `_chat`.

    Args:
        max_concurrency (`int`, *optional*, defaults to `8`): simultaneous calls allowed into this back end.
    """

    def __init__(self, max_concurrency: int = 8):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self._slots = threading.Semaphore(max_concurrency)
        self._log_lock = threading.Lock()
        self.calls: list[dict] = []
        self.abort: threading.Event | None = None  # set by the runner on Ctrl-C; long calls stop early

    def chat(
        self, messages: list[dict], tools: list[dict] | None = None, role: str = "agent", seed: int | None = None
    ) -> ChatResult:
        """One completion; `seed` (the trial's, see `runner.TrialBackend`) goes to back ends that accept one."""
        with self._slots:
            start = time.perf_counter()
            result = self._chat(messages, tools, seed)
            result.latency_s = time.perf_counter() - start
        with self._log_lock:
            self.calls.append(
                {
                    "role": role,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "latency_s": round(result.latency_s, 4),
                }
            )
        return result

    def _chat(self, messages: list[dict], tools: list[dict] | None, seed: int | None) -> ChatResult:
        raise NotImplementedError


class ScriptedBackend(ChatBackend):
    """Replies from a Python function `script(messages, tools) -> str`; text tool calls are parsed.

    Args:
        script (`Callable`): returns the reply text (may contain `<tool_call>` blocks).
        delay_s (`float`, *optional*, defaults to `0.0`): sleep per call (benchmarks: a fixed-latency model).
    """

    def __init__(
        self, script: Callable[[list[dict], list[dict] | None], str], delay_s: float = 0.0, max_concurrency: int = 64
    ):
        super().__init__(max_concurrency)
        self.script, self.delay_s = script, delay_s

    def _chat(self, messages, tools, seed=None):
        if self.delay_s:
            (self.abort or threading.Event()).wait(self.delay_s)
        text = self.script(messages, tools)
        content, calls = parse_tool_calls(text)
        words = sum(len(str(m.get("content") or "").split()) for m in messages)
        return ChatResult(content, calls, prompt_tokens=words, completion_tokens=len(text.split()))


class OpenAIBackend(ChatBackend):
    """Any OpenAI-compatible `/chat/completions` endpoint (vLLM `serve`, hosted APIs); native function calling.

    Only failures that can succeed on retry are retried (timeouts, connection errors, 429, 5xx), with exponential
    back-off; any other reply (e.g. a 400 for a context overflow) raises [`BackendError`] at once with the server's
    message.

    Args:
        model (`str`): model name sent to the endpoint.
        base_url (`str`): e.g. `http://localhost:8000/v1`.
        api_key (`str`, *optional*): bearer token.
        temperature (`float`, *optional*, defaults to `0.0`): models.yaml default.
        max_tokens (`int`, *optional*, defaults to `4096`): completion cap.
        timeout_s (`float`, *optional*, defaults to `600.0`): per-request timeout.
        max_retries (`int`, *optional*, defaults to `3`): retries of retryable failures.
        seed (`int`, *optional*): sent with requests that bring no seed of their own (vLLM and OpenAI accept it).
        enable_thinking (`bool`, *optional*): sent as `chat_template_kwargs.enable_thinking` (Qwen3-style templates
            on vLLM); None sends nothing.
        retry_wait_s (`float`, *optional*, defaults to `1.0`): first back-off wait (doubles per retry).
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 4096,
        max_concurrency: int = 8,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        seed: int | None = None,
        enable_thinking: bool | None = None,
        retry_wait_s: float = 1.0,
    ):
        super().__init__(max_concurrency)
        import httpx

        self.model, self.temperature, self.max_tokens, self.max_retries = model, temperature, max_tokens, max_retries
        self.seed, self.enable_thinking, self.retry_wait_s = seed, enable_thinking, retry_wait_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)

    def context_length(self) -> int | None:
        """The served model's context window if the endpoint reports it (vLLM: `max_model_len` in `/models`)."""
        import httpx

        try:
            resp = self.client.get("/models", timeout=10.0)
            resp.raise_for_status()
            for m in resp.json().get("data", []):
                if m.get("id") == self.model and isinstance(m.get("max_model_len"), int):
                    return m["max_model_len"]
        except (httpx.HTTPError, ValueError):
            return None
        return None

    def _post(self, body: dict) -> dict:
        import httpx

        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                resp = self.client.post("/chat/completions", json=body)
            except httpx.TransportError as err:  # timeouts, refused or dropped connections
                last = f"{type(err).__name__}: {err}"
            else:
                if resp.status_code < 400:
                    try:
                        return resp.json()
                    except ValueError:
                        raise BackendError(f"{self.client.base_url}: reply is not JSON: {resp.text[:300]!r}") from None
                last = f"HTTP {resp.status_code}: {_server_message(resp)}"
                if resp.status_code != 429 and resp.status_code < 500:
                    raise BackendError(f"{self.client.base_url} ({self.model}): {last}")
            if attempt == self.max_retries:
                break
            logger.warning("%s: %s; retry %d/%d", self.client.base_url, last, attempt + 1, self.max_retries)
            if (self.abort or threading.Event()).wait(self.retry_wait_s * 2**attempt):
                break
        raise BackendError(f"{self.client.base_url} ({self.model}) failed after {attempt + 1} tries: {last}")

    def _chat(self, messages, tools, seed=None):
        wire = []
        for m in messages:
            if m["role"] == "assistant" and m.get("tool_calls"):
                wire.append(
                    {
                        "role": "assistant",
                        "content": m.get("content") or None,
                        "tool_calls": [
                            {
                                "id": c["id"],
                                "type": "function",
                                "function": {
                                    "name": c["name"],
                                    "arguments": c["arguments"]
                                    if isinstance(c["arguments"], str)
                                    else json.dumps(c["arguments"], ensure_ascii=False),
                                },
                            }
                            for c in m["tool_calls"]
                        ],
                    }
                )
            elif m["role"] == "tool":
                wire.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
            else:
                wire.append({"role": m["role"], "content": m.get("content") or ""})
        body = {"model": self.model, "messages": wire, "temperature": self.temperature, "max_tokens": self.max_tokens}
        seed = self.seed if seed is None else seed
        if seed is not None:
            body["seed"] = seed
        if self.enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if tools:
            body["tools"] = tools
        data = self._post(body)
        try:
            msg = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.client.base_url}: reply has no choices[0].message: {str(data)[:300]}") from None
        calls = []
        for c in msg.get("tool_calls") or []:
            raw = c["function"].get("arguments") or "{}"
            try:
                args = json.loads(raw)
            except json.JSONDecodeError:  # kept as the text: the call's observation names the malformed JSON
                args = raw
            calls.append(
                {"id": c.get("id") or f"call_{uuid.uuid4().hex[:8]}", "name": c["function"]["name"], "arguments": args}
            )
        content = msg.get("content") or ""
        if not calls:  # endpoints without a tool parser: fall back to the text protocol
            content, calls = parse_tool_calls(content)
        usage = data.get("usage") or {}
        return ChatResult(content, calls, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))


def _server_message(resp) -> str:
    """The error text of an OpenAI-style error body (`{"error": {"message": ...}}` or `{"message": ...}`)."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if isinstance(err, str):
            return err[:500]
    return resp.text[:500]


class TransformersBackend(ChatBackend):
    """An in-process causal LM (`AutoModelForCausalLM`), greedy decoding, text tool-call protocol.

    Args:
        model_path (`str`): local checkpoint folder (e.g. `agentrl_shared.models.smollm2_135m()`).
        max_new_tokens (`int`, *optional*, defaults to `128`): completion cap.
        max_input_tokens (`int`, *optional*, defaults to `4096`): the prompt is left-truncated beyond this.
    """

    def __init__(self, model_path: str, max_new_tokens: int = 128, max_input_tokens: int = 4096):
        super().__init__(max_concurrency=1)  # one model, one generate at a time (2-core CPU)
        from agentrl_shared.offline import set_offline_env

        set_offline_env()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.max_new_tokens, self.max_input_tokens = max_new_tokens, max_input_tokens

    def _chat(self, messages, tools, seed=None):
        import torch

        text_messages = to_text_messages(messages, tools)
        prompt = self.tokenizer.apply_chat_template(text_messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"][
            :, -self.max_input_tokens :
        ]
        from transformers import StoppingCriteria, StoppingCriteriaList

        abort = self.abort

        class StopOnAbort(StoppingCriteria):  # Ctrl-C ends a long generate at the next token
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), bool(abort is not None and abort.is_set()))

        with torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.pad_token_id,
                stopping_criteria=StoppingCriteriaList([StopOnAbort()]),
            )
        completion = out[0, ids.shape[1] :]
        text = self.tokenizer.decode(completion, skip_special_tokens=True)
        content, calls = parse_tool_calls(text)
        return ChatResult(content, calls, prompt_tokens=int(ids.shape[1]), completion_tokens=int(completion.shape[0]))


def build_backend(
    spec: str,
    max_concurrency: int = 8,
    max_new_tokens: int = 128,
    api_key: str | None = None,
    temperature: float = 0.0,
    max_input_tokens: int = 4096,
    max_tokens: int = 4096,
    enable_thinking: bool | None = None,
    timeout_s: float = 600.0,
) -> ChatBackend:
    """Back end from a CLI spec.

    - `transformers:PATH_OR_NAME` (`smollm2-135m` resolves through `agentrl_shared.models.model_path`);
    - `openai:MODEL@BASE_URL` (e.g. `openai:gpt-4.1@https://api.openai.com/v1`, `openai:qwen@http://localhost:8000/v1`).
    """
    kind, _, rest = spec.partition(":")
    if kind == "transformers":
        from agentrl_shared.models import model_path

        return TransformersBackend(model_path(rest), max_new_tokens=max_new_tokens, max_input_tokens=max_input_tokens)
    if kind == "openai":
        model, _, url = rest.partition("@")
        if not model or not url:
            raise ValueError(f"openai back end spec must be 'openai:MODEL@BASE_URL', got {spec!r}")
        return OpenAIBackend(
            model,
            url,
            api_key=api_key,
            temperature=temperature,
            max_tokens=max_tokens,
            max_concurrency=max_concurrency,
            timeout_s=timeout_s,
            enable_thinking=enable_thinking,
        )
    raise ValueError(f"Unknown back end kind {kind!r} in {spec!r}; valid: 'transformers:PATH', 'openai:MODEL@URL'")
