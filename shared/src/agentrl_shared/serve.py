"""Serve a checkpoint behind an OpenAI-compatible `/v1/chat/completions`, so every benchmark harness talks to a
trained policy the same way.

- GPU: vLLM's own server; `vllm_command` returns the command we document (Qwen3 tool calls parsed by vLLM's `hermes`
  parser, `<think>` split by the `qwen3` reasoning parser):
  `vllm serve CKPT --served-model-name NAME --port 8000 --enable-auto-tool-choice --tool-call-parser hermes
  --reasoning-parser qwen3`.
- CPU: `OpenAIServer`, an in-process transformers back end behind a real local HTTP server (`http.server`, one
  generation at a time). `python -m agentrl_shared.serve --model CKPT --port 8000` runs it in the foreground.

The chat template renders `tools` and the assistant's earlier `tool_calls`; the reply's Qwen3 blocks
(`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`) are parsed into the OpenAI `tool_calls` field
(arguments as a JSON string) and a leading `<think>...</think>` into `reasoning_content`, as vLLM's parsers do.
Templates that know nothing of tools (SmolLM2's) get the tool list and calls as Qwen3-style text instead (the same
convention as Qwen3's template: tools listed in the system message, results in `<tool_response>` user turns).
"""

import argparse
import json
import logging
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


logger = logging.getLogger(__name__)
TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
THINK_RE = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.DOTALL)


def vllm_command(model: str, name: str, port: int = 8000, max_model_len: int | None = None) -> list[str]:
    """The vLLM server command for a Qwen3-style checkpoint (tool calls and thinking parsed server-side)."""
    cmd = ["vllm", "serve", model, "--served-model-name", name, "--port", str(port), "--enable-auto-tool-choice",
           "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3"]  # fmt: skip
    return cmd + (["--max-model-len", str(max_model_len)] if max_model_len else [])


def parse_reply(text: str) -> dict:
    """Split a raw completion into `content`, `reasoning_content` and OpenAI `tool_calls`.

    A `<tool_call>` block whose body is not a JSON object with a string `name` stays in `content` (the client sees
    the malformed text, as with vLLM's hermes parser)."""
    reasoning = None
    think = THINK_RE.match(text) if "</think>" in text else None
    if think:
        reasoning, text = think.group(1).strip(), text[think.end() :]
    calls = []
    for match in TOOL_CALL_RE.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not (isinstance(obj, dict) and isinstance(obj.get("name"), str)):
            continue
        args = obj.get("arguments", {})
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": obj["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}})  # fmt: skip
        text = text.replace(match.group(0), "", 1)
    return {"content": text.strip() or None, "reasoning_content": reasoning, "tool_calls": calls}


def _arguments(raw) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


def template_messages(messages: list[dict], tools: list[dict] | None, native_tools: bool) -> list[dict]:
    """OpenAI wire messages -> chat-template messages.

    Native (the template renders tools): assistant `tool_calls` get dict arguments, the rest is passed through.
    Text fallback: tools in the system message, calls as `<tool_call>` text, tool results as user turns holding
    `<tool_response>` blocks (consecutive ones merged), as Qwen3's template renders them."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        content = content or ""
        calls = m.get("tool_calls") or []
        if native_tools:
            msg = {"role": m["role"], "content": content}
            if calls:
                msg["tool_calls"] = [{"type": "function", "function": {"name": c["function"]["name"],
                                      "arguments": _arguments(c["function"].get("arguments"))}} for c in calls]  # fmt: skip
            if m["role"] == "tool" and m.get("tool_call_id"):
                msg["tool_call_id"] = m["tool_call_id"]
            out.append(msg)
        elif m["role"] == "assistant" and calls:
            blocks = [json.dumps({"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))},
                                 ensure_ascii=False) for c in calls]  # fmt: skip
            out.append({"role": "assistant",
                        "content": "\n".join([content, *(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)]).strip()})  # fmt: skip
        elif m["role"] == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + block}
            else:
                out.append({"role": "user", "content": block})
        else:
            out.append({"role": m["role"], "content": content})
    if tools and not native_tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        text = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{listing}\n"
                "</tools>\n\nFor each function call, return a json object with function name and arguments within "
                '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
                "\n</tool_call>")  # fmt: skip
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


class ChatModel:
    """A causal LM and its tokenizer, one `generate` at a time (a lock), for `OpenAIServer`.

    Args:
        model (`str`): a local checkpoint folder or an offline name (`agentrl_shared.models.model_path`).
        dtype (`str`, *optional*, defaults to `"float32"`): torch dtype of the weights.
        max_input_tokens (`int`, *optional*, defaults to `8192`): prompts are left-truncated beyond this.
        max_new_tokens (`int`, *optional*): server-side cap on completion tokens (clients such as BFCL ask for up to
            4096; a CPU run caps them).
    """

    def __init__(
        self, model: str, dtype: str = "float32", max_input_tokens: int = 8192, max_new_tokens: int | None = None
    ):
        from .offline import set_offline_env

        set_offline_env()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .lora import load_model
        from .models import model_path

        path = model_path(model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = load_model(path, AutoModelForCausalLM, dtype=getattr(torch, dtype)).eval()  # LoRA: merged
        self.native_tools = "tools" in (self.tokenizer.chat_template or "")
        self.max_input_tokens, self.max_new_tokens = max_input_tokens, max_new_tokens
        self.lock = threading.Lock()

    def prompt(self, messages: list[dict], tools: list[dict] | None, template_kwargs: dict | None = None) -> str:
        chat = template_messages(messages, tools, self.native_tools)
        kwargs = {"tools": tools} if tools and self.native_tools else {}
        return self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                                  **kwargs, **(template_kwargs or {}))  # fmt: skip

    def generate(self, prompt: str, body: dict) -> tuple[str, int, int, bool]:
        """Generate from a rendered prompt with the request's sampling fields; returns (text, prompt tokens,
        completion tokens, ended on an end token). Special tokens other than end/padding stay in the text."""
        import torch

        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = ids[:, -self.max_input_tokens :]
        max_new = int(body.get("max_completion_tokens") or body.get("max_tokens") or 512)
        max_new = min(max_new, self.max_new_tokens or max_new)
        temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
        sample = {"do_sample": False}
        if temperature > 0:
            sample = {"do_sample": True, "temperature": temperature, "top_p": float(body.get("top_p") or 1.0)}
        with self.lock, torch.no_grad():
            if body.get("seed") is not None:
                torch.manual_seed(int(body["seed"]))
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                                      **sample)  # fmt: skip
        completion = out[0, ids.shape[1] :]
        gen_eos = self.model.generation_config.eos_token_id
        eos = {self.tokenizer.eos_token_id, *([gen_eos] if isinstance(gen_eos, int) else gen_eos or [])}
        finished = completion.numel() > 0 and int(completion[-1]) in eos
        # keep `<tool_call>` / `<think>` (special tokens in the Qwen vocabulary); drop only end and padding tokens
        drop = eos | {self.tokenizer.pad_token_id, *(body.get("stop_token_ids") or [])}
        text = self.tokenizer.decode([t for t in completion.tolist() if t not in drop], skip_special_tokens=False)
        return text, int(ids.shape[1]), int(completion.numel()), finished

    def complete(self, body: dict) -> dict:
        """An OpenAI `chat.completion` object for a request body (`n` = 1; `stop` strings are not supported)."""
        prompt = self.prompt(body["messages"], body.get("tools"), body.get("chat_template_kwargs"))
        text, n_prompt, n_completion, finished = self.generate(prompt, body)
        reply = parse_reply(text)
        message = {"role": "assistant", "content": reply["content"]}
        if reply["reasoning_content"] is not None:
            message["reasoning_content"] = reply["reasoning_content"]
        if reply["tool_calls"]:
            message["tool_calls"] = reply["tool_calls"]
        finish = "tool_calls" if reply["tool_calls"] else ("stop" if finished else "length")
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", ""), "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                          "total_tokens": n_prompt + n_completion}}  # fmt: skip

    def complete_text(self, body: dict) -> dict:
        """An OpenAI `text_completion` object for a raw `prompt` (`/v1/completions`, used by BFCL's local-model
        handlers, which render the chat template themselves)."""
        text, n_prompt, n_completion, finished = self.generate(body["prompt"], body)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", ""),
                "choices": [{"index": 0, "text": text, "finish_reason": "stop" if finished else "length"}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                          "total_tokens": n_prompt + n_completion}}  # fmt: skip


class OpenAIServer:
    """A local HTTP server with `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions` over a
    `ChatModel`.

    Use as a context manager (serves in a background thread) or call `serve_forever()`. `url` is the base URL
    clients take (`http://127.0.0.1:PORT/v1`). Bad requests get an OpenAI-style `{"error": {"message": ...}}` with
    status 400; a failing generation gets status 500 with the exception text.

    Args:
        chat_model (`ChatModel`): the model to serve.
        name (`str`): the model id reported by `/v1/models` (requests may name any model).
        host (`str`, *optional*, defaults to `"127.0.0.1"`), port (`int`, *optional*, defaults to `0` = a free port).
    """

    def __init__(self, chat_model: ChatModel, name: str, host: str = "127.0.0.1", port: int = 0):
        self.chat_model, self.name = chat_model, name
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):
                logger.debug("%s " + fmt, self.address_string(), *args)

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.name, "object": "model",
                                     "max_model_len": server.chat_model.max_input_tokens}]})  # fmt: skip
                else:
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})

            def do_POST(self):
                path = self.path.rstrip("/").removeprefix("/v1")
                if path not in ("/chat/completions", "/completions"):
                    self._send(404, {"error": {"message": f"unknown path {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    if path == "/completions" and not isinstance(body.get("prompt"), str):
                        raise ValueError("the request needs a `prompt` string (one prompt per request)")
                    if path == "/chat/completions" and (
                        not isinstance(body.get("messages"), list) or not body["messages"]
                    ):
                        raise ValueError("the request needs a non-empty `messages` list")
                    if body.get("stream"):
                        raise ValueError("`stream: true` is not supported by this server; send stream=false")
                except ValueError as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                    return
                try:
                    model = server.chat_model
                    self._send(200, model.complete(body) if path == "/chat/completions" else model.complete_text(body))
                except Exception as exc:  # noqa: BLE001 - any generation failure becomes an HTTP 500 for the client
                    logger.exception("generation failed")
                    self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}})

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/v1"
        self._thread: threading.Thread | None = None

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def __enter__(self) -> "OpenAIServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentrl_shared.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="checkpoint folder or offline name (smollm2-135m, tiny-qwen3)")
    parser.add_argument("--served-model-name", default=None, help="id reported by /v1/models (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-input-tokens", type=int, default=8192)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="cap on completion tokens per request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    chat_model = ChatModel(args.model, args.dtype, args.max_input_tokens, args.max_new_tokens)
    server = OpenAIServer(chat_model, args.served_model_name or args.model, args.host, args.port)
    logger.info("serving %s at %s", args.model, server.url)
    server.serve_forever()


if __name__ == "__main__":
    main()
