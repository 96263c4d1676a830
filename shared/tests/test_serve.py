"""The OpenAI-compatible server: Qwen3 tool-call parsing, prompt rendering, and real HTTP round trips with the
offline tiny Qwen3 (real Qwen tokenizer and chat template) and SmolLM2 (a template without tools)."""

import json

import httpx
import pytest

from agentrl_shared.serve import ChatModel, OpenAIServer, parse_reply, template_messages, vllm_command


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip


def test_parse_reply_splits_thinking_and_qwen3_tool_calls():
    text = ('<think>\nI need the weather.\n</think>\n\nLet me check.\n<tool_call>\n{"name": "get_weather", '
            '"arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Rome"}}\n</tool_call>')  # fmt: skip
    reply = parse_reply(text)
    assert reply["reasoning_content"] == "I need the weather."
    assert reply["content"] == "Let me check."
    assert [c["function"]["name"] for c in reply["tool_calls"]] == ["get_weather", "get_weather"]
    assert [json.loads(c["function"]["arguments"]) for c in reply["tool_calls"]] == [
        {"city": "Paris"},
        {"city": "Rome"},
    ]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in reply["tool_calls"])
    assert len({c["id"] for c in reply["tool_calls"]}) == 2


def test_parse_reply_keeps_malformed_blocks_and_plain_text():
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'
    assert parse_reply(bad) == {"content": bad, "reasoning_content": None, "tool_calls": []}
    no_name = '<tool_call>\n{"arguments": {}}\n</tool_call>'
    assert parse_reply(no_name)["tool_calls"] == [] and parse_reply(no_name)["content"] == no_name
    assert parse_reply("Hello.") == {"content": "Hello.", "reasoning_content": None, "tool_calls": []}
    assert parse_reply('<tool_call>{"name": "f", "arguments": {}}</tool_call>')["content"] is None


def test_text_fallback_renders_tools_calls_and_results_qwen3_style():
    wire = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
    ]  # fmt: skip
    out = template_messages(wire, [WEATHER], native_tools=False)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert json.dumps(WEATHER) in out[0]["content"] and "<tools>" in out[0]["content"]
    assert out[2]["content"].count("<tool_call>") == 2 and '"city": "Rome"' in out[2]["content"]
    assert out[3]["content"] == "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response>"
    native = template_messages(wire, [WEATHER], native_tools=True)
    assert native[1]["tool_calls"][1]["function"]["arguments"] == {"city": "Rome"}  # dicts for the template


def test_vllm_command_enables_qwen3_tool_and_reasoning_parsers():
    cmd = vllm_command("/ckpt", "policy", 8001)
    assert cmd[:3] == ["vllm", "serve", "/ckpt"]
    joined = " ".join(cmd)
    assert "--enable-auto-tool-choice" in joined and "--tool-call-parser hermes" in joined
    assert "--reasoning-parser qwen3" in joined and "--port 8001" in joined and "--served-model-name policy" in joined


@pytest.fixture(scope="module")
def tiny_qwen3_server():
    with OpenAIServer(ChatModel("tiny-qwen3"), "tiny") as server:
        yield server


def test_http_chat_completion_with_the_tiny_qwen3(tiny_qwen3_server):
    server = tiny_qwen3_server
    assert server.chat_model.native_tools  # the Qwen3 template renders tools itself
    models = httpx.get(f"{server.url}/models").json()
    assert models["data"][0]["id"] == "tiny"
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER],
            "max_tokens": 5, "temperature": 0}  # fmt: skip
    reply = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120).json()
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["role"] == "assistant"
    assert 1 <= reply["usage"]["completion_tokens"] <= 5
    prompt = server.chat_model.prompt(body["messages"], body["tools"])
    assert reply["usage"]["prompt_tokens"] == len(
        server.chat_model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    )
    assert '"name": "get_weather"' in prompt and "<tools>" in prompt  # the schema reached the model
    again = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120).json()
    assert again["choices"][0]["message"] == reply["choices"][0]["message"]  # greedy at temperature 0
    text = httpx.post(f"{server.url}/completions", json={"prompt": prompt, "max_tokens": 3, "temperature": 0}).json()
    assert text["object"] == "text_completion" and text["usage"]["completion_tokens"] <= 3
    bad = httpx.post(f"{server.url}/chat/completions", json={"model": "tiny"})
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    assert httpx.post(f"{server.url}/chat/completions", json={**body, "stream": True}).status_code == 400


class ScriptedChatModel(ChatModel):
    """The real tiny Qwen3 and template; `generate` returns a fixed Qwen3 reply (a random model never emits one)."""

    def generate(self, prompt, body):
        self.last_prompt = prompt
        text = '<think>\nplan\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        return text, 7, 3, True


def test_http_tool_calls_reach_the_openai_client_field():
    with OpenAIServer(ScriptedChatModel("tiny-qwen3"), "tiny") as server:
        history = [{"role": "user", "content": "Weather in Paris?"}]
        body = {"model": "tiny", "messages": history, "tools": [WEATHER], "temperature": 0}
        message = httpx.post(f"{server.url}/chat/completions", json=body, timeout=60).json()["choices"][0]
        assert message["finish_reason"] == "tool_calls"
        call = message["message"]["tool_calls"][0]
        assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {
            "city": "Paris"
        }
        assert message["message"]["reasoning_content"] == "plan" and message["message"]["content"] is None
        # the client echoes the call back with the tool result: the template renders both in Qwen3's format
        history += [message["message"], {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
        httpx.post(f"{server.url}/chat/completions", json={**body, "messages": history}, timeout=60)
        prompt = server.chat_model.last_prompt
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
        assert "<tool_response>\nsunny\n</tool_response>" in prompt


def test_smollm2_template_without_tools_gets_the_text_protocol():
    model = ChatModel("smollm2-135m")
    assert not model.native_tools
    prompt = model.prompt([{"role": "user", "content": "Weather in Paris?"}], [WEATHER])
    assert "<tools>" in prompt and '"get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n")
