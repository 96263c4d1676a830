"""User simulator: vague, never volunteers preferences, reveals the hidden intention only when asked directly.

Official code: meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d, `src/vita/user/personalization_user.py` and
`src/vita/prompts/personalization_user_system_prompt.yaml` (proactive section) (user turn 1 is
the subtask `instruction` verbatim; later turns come from the user LLM; `###STOP###` ends the conversation).
For VitaBench 1.0 tasks the whole goal (`instructions`) is given to the simulator, which also writes turn 1.
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


class UserSimulator:
    """LLM user for one subtask.

    Args:
        backend ([`ChatBackend`]): the user model.
        subtask ([`SubTask`]): the subtask being simulated.
        persona (`str`): the user profile, rendered as text.
        user_id (`str`): given when the agent asks for identity.
    """

    def __init__(self, backend: ChatBackend, subtask: SubTask, persona: str, user_id: str):
        self.backend, self.subtask = backend, subtask
        # 1.0 tasks: the hidden goal *is* the instruction; 2.0: the vague request plus the hidden intention.
        instruction = subtask.instruction or subtask.user_intention
        proactive = ""
        if subtask.instruction and subtask.user_intention:
            proactive = PROACTIVE_SECTION.format(intention=subtask.user_intention)
        self.system_prompt = USER_SYSTEM_PROMPT.format(
            persona=persona, instruction=instruction, user_id=user_id, proactive_section=proactive, stop=STOP_TOKEN
        )
        self.results = []  # ChatResults of this subtask, for token accounting

    def first_message(self) -> str:
        """Turn 1: the instruction verbatim (2.0), or an opening line written by the simulator (1.0)."""
        if self.subtask.instruction:
            return self.subtask.instruction
        return self.respond([])

    def respond(self, conversation: list[dict]) -> str:
        """Next user line given the agent-side conversation (tool traffic is invisible to the user)."""
        # Roles flip: the agent's visible replies are the simulator's "user" turns.
        msgs = [{"role": "system", "content": self.system_prompt}]
        for m in conversation:
            if m["role"] == "assistant" and (m.get("content") or "").strip():
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
