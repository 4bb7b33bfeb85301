"""Stand-ins for the agent tests: a chat model that records every message list it is sent
and answers by a script, and the tools the scripts call (no LLM, no network)."""

from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool


@tool
def count_bolts(crate: int) -> str:
    """How many bolts a crate holds."""
    return f"Crate {crate} holds {10 * crate} bolts."


@tool
def weigh(crate: int) -> str:
    """What a crate weighs."""
    return f"Crate {crate} weighs {crate + 2} kg."


def crate_of(text: str) -> int:
    """The crate number a question names (its digits)."""
    return int("".join(c for c in text if c.isdigit()) or 0)


class RecordingModel(BaseChatModel):
    """Keeps every message list it was sent (``sent``) and answers with :meth:`reply`."""

    sent: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "RecordingModel":
        return self

    def reply(self, messages: list) -> AIMessage:
        raise NotImplementedError

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.sent.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages))])
