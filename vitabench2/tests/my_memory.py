"""A user memory class loaded by dotted path in the tests (`my_memory.KeywordMemory`)."""

from vitabench2.memory import BaseMemory


class KeywordMemory(BaseMemory):
    """Keeps interactions that mention a keyword."""

    def __init__(self, keyword: str = "spicy", **kwargs):
        super().__init__(**kwargs)
        self.keyword, self.kept = keyword, []

    def read(self, query=None):
        return "\n".join(self.kept)

    def update(self, new_interactions, llm=None, **kwargs):
        self.kept += [str(i) for i in new_interactions if self.keyword in str(i)]
        return self.read()

    def reset(self):
        self.kept = []
