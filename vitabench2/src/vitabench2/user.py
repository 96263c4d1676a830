"""User simulators of both task versions.

VitaBench 2.0 (official meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/user/personalization_user.py`, `src/vita/prompts/personalization_user_system_prompt.yaml` and
`personalization_user_proactive_section.yaml`): vague, never volunteers preferences; user turn 1 is the subtask
`instruction` verbatim, later turns come from the user LLM; the hidden-information section is added only on proactive
subtasks with a non-empty `user_intention`; `###STOP###` ends the conversation.

VitaBench 1.0 (meituan-longcat/vitabench @ 96f3b8529d8ea38d330de2405af7e32a1454f6cd, `src/vita/user/
user_simulator.py`, `src/vita/prompts/user_system_prompt.yaml`, unchanged in 2.0): the simulator conveys the task's
whole `instructions`, every detail of them, over several turns in the persona's style, and writes turn 1 itself. Its
official prompt says nothing of the stop token (the agent ends the conversation); ours does not either.

Both see only the agent's plain replies: an agent message that calls tools never reaches the user (official
`flip_roles`; the orchestrator passes the user no tool-call message).
"""

from .backends import ChatBackend
from .tasks import SubTask


STOP_TOKEN = "###STOP###"
USER_SYSTEM_PROMPT = """# Role
You are playing a user talking to a life-service assistant (food delivery, in-store services, travel). Your persona:
<persona>
{persona}
</persona>

# Current task
You need to make the following request to the assistant:
<instruction>
{instruction}
</instruction>

# Conversation style
- Write only one line per message, as a real user would.
- Keep requests vague and short; do not volunteer details.
- When the assistant asks about your preferences, answer vaguely ("whatever", "you decide", "I'm not sure").

# Accepting or rejecting
- Accept or reject only after the assistant gives a clear recommendation.
- Accept if the recommendation satisfies the explicit conditions in <instruction> (size, quantity, time, price limit);
  otherwise briefly say you are not satisfied, without giving the reason.

# Disclosure
- Never reveal your preferences; let the assistant infer them from its memory.
- If asked who you are (user id, phone), reply with your user id: {user_id}.
{proactive_section}
# Ending
- When the assistant has completed your request and you are satisfied, reply with '{stop}'."""

PROACTIVE_SECTION = """
# Hidden information (reveal only when asked directly)
<hidden_intention>
{intention}
</hidden_intention>
- Do not mention this information on your own.
- If the assistant asks a question that directly concerns it, answer with exactly that information.
"""
V1_USER_SYSTEM_PROMPT = """# Role
You are playing a user talking to an assistant. Your persona is in <persona>; your job is to get across everything
in <instructions> to the assistant through the conversation.
<persona>
{persona}
</persona>
<instructions>
{instructions}
</instructions>

# Conversation style
- Write only one line per message, as a real user would.
- Describe your situation first, then say what you need.
- When a decision is needed, give the conditions and preferences from <instructions> and let the assistant choose;
  ask for its advice ("which one would you recommend?").
- Show the personality of <persona> in your tone, emotions and wording.

# What to tell
- Split <instructions> into separate points and bring them up over several turns; do not say everything at once.
- Pass on the information of <instructions> as it is, in the persona's own style.
- Every detail of <instructions> must come up during the conversation, background details included: they can
  change what the assistant recommends.

# Answering
- Answer the assistant's questions from <persona> and <instructions>; when they hold no answer, say you do not
  remember or do not know. Give information as soon as it is asked for.
- Never invent what <instructions> does not say (no made-up order ids); when asked who you are, give your user id.
- Ask for exactly what <instructions> states: no assumptions, extensions, substitutes or summaries.
- When the assistant offers to place the order, say yes, please do; never say you will order it yourself.
- Rely on the assistant and keep the conversation going until the task is done.
- If the assistant tries to talk you out of a requirement, keep to <instructions>.
- If the assistant asks the same already-answered question more than three times, show impatience and refuse
  ("I already told you that").

# Do not end the conversation
- before every need and constraint has been stated clearly and completely;
- before the assistant has done every task of <instructions> with nothing left out;
- while the assistant's results are wrong, incomplete or not what you asked for.

# You may end it
- only when all of the above holds and every task has been done correctly, or when you have stated everything and
  the assistant says clearly that it cannot do it for technical reasons."""


class UserSimulator:
    """LLM user for one subtask.

    Args:
        backend ([`ChatBackend`]): the user model.
        subtask ([`SubTask`]): the subtask being simulated.
        persona (`str`): the user profile, rendered as text.
        user_id (`str`): given when the agent asks for identity.
        version (`str`, *optional*, defaults to `"2.0"`): the task's VitaBench version, `"1.0"` or `"2.0"`; picks
            the prompt.
    """

    def __init__(self, backend: ChatBackend, subtask: SubTask, persona: str, user_id: str, version: str = "2.0"):
        if version not in ("1.0", "2.0"):
            raise ValueError(f"Unknown VitaBench version {version!r}; valid: 1.0, 2.0")
        self.backend, self.subtask, self.version = backend, subtask, version
        if version == "1.0":
            # 1.0 tasks are wrapped with their `instructions` as the hidden `user_intention` (tasks.py).
            self.system_prompt = V1_USER_SYSTEM_PROMPT.format(persona=persona, instructions=subtask.user_intention)
        else:
            proactive = ""
            if subtask.is_proactive and subtask.user_intention:
                proactive = PROACTIVE_SECTION.format(intention=subtask.user_intention)
            self.system_prompt = USER_SYSTEM_PROMPT.format(
                persona=persona,
                instruction=subtask.instruction,
                user_id=user_id,
                proactive_section=proactive,
                stop=STOP_TOKEN,
            )
        self.results = []  # ChatResults of this subtask, for token accounting

    def first_message(self) -> str:
        """Turn 1: the instruction verbatim (2.0), or an opening line written by the simulator (1.0)."""
        if self.version == "2.0":
            return self.subtask.instruction
        return self.respond([])

    def respond(self, conversation: list[dict]) -> str:
        """Next user line given the agent-side conversation (tool traffic, and the text of an agent message that calls
        tools, are invisible to the user)."""
        # Roles flip: the agent's visible replies are the simulator's "user" turns.
        msgs = [{"role": "system", "content": self.system_prompt}]
        for m in conversation:
            if m["role"] == "assistant" and not m.get("tool_calls") and (m.get("content") or "").strip():
                msgs.append({"role": "user", "content": m["content"]})
            elif m["role"] == "user":
                msgs.append({"role": "assistant", "content": m["content"]})
        if len(msgs) == 1:
            msgs.append(
                {"role": "user", "content": "(The assistant is waiting. Start the conversation with your request.)"}
            )
        result = self.backend.chat(msgs, role="user")
        self.results.append(result)
        text = result.content.strip()
        if STOP_TOKEN in text:
            return text
        lines = [line for line in text.splitlines() if line.strip()]
        return lines[0].strip() if lines else text
